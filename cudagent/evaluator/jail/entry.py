"""The entry point of a candidate's process: confine it (confine.py), then become the child harness (child.py).

    python -s -m cudagent.evaluator.jail.entry [--confine PLAN_JSON] child.py's arguments...

Runs in a fresh interpreter before torch is imported (the package's __init__ imports nothing heavy), or in a child
the zygote just forked (single-threaded). Either way nothing but this thread exists when Landlock binds it.
"""

from __future__ import annotations

import os
import sys

import cudagent.evaluator.jail.confine as confine
import cudagent.evaluator.jail.privileges as isolation


def run_child(argv: list[str]) -> None:
    """Confine as `--confine PLAN_JSON` in argv says (after giving up privileges: no_new_privs, which both of
    confine's mechanisms require), then run the child harness; that ends the process."""
    argv = list(argv)
    plan = None
    if "--confine" in argv:
        i = argv.index("--confine")
        plan = confine.Plan.from_json(argv[i + 1])
        del argv[i : i + 2]
    if plan is not None:
        isolation.drop_privileges()
        try:
            confine.enter(plan)
        except confine.Unconfined as exc:
            print(f"cudagent: strict confinement is not available here: {exc}", flush=True)
            os._exit(confine.EXIT_UNCONFINED)
    import cudagent.evaluator.child as child  # torch, and everything else, only now

    child.main(argv)


if __name__ == "__main__":
    # through the module's own name: run as __main__ this file is a second copy of the module
    import cudagent.evaluator.jail.entry

    cudagent.evaluator.jail.entry.run_child(sys.argv[1:])
