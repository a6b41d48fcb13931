"""The entry point of a jailed process: keep its tree (keeper.py), confine it (confine.py), then become what it runs.

    python -s -m cudagent.evaluator.jail.entry [--tree TREE] [--confine PLAN_JSON] child.py's arguments...
    python -s -m cudagent.evaluator.jail.entry [--confine PLAN_JSON] --exec PROGRAM ARGS...     (a build's ninja)

Runs in a fresh interpreter before torch is imported (the package's __init__ imports nothing heavy), or in a child
the fork server just forked (single-threaded). Either way nothing but this thread exists when the keeper forks and
Landlock binds the process. Privileges go first (no_new_privs, which Landlock and seccomp require, and every
capability), so nothing the process runs can take them back.
"""

from __future__ import annotations

import os
import sys

import cudagent.evaluator.jail.confine as confine
import cudagent.evaluator.jail.keeper as keeper
import cudagent.evaluator.jail.privileges as isolation


def _take(argv: list[str], flag: str) -> str | None:
    if flag not in argv:
        return None
    i = argv.index(flag)
    value = argv[i + 1]
    del argv[i : i + 2]
    return value


def run_child(argv: list[str]) -> None:
    """Keep the tree as `--tree` says, confine as `--confine PLAN_JSON` says, then run the child harness (or, after
    `--exec`, the program named there); that ends the process."""
    argv = list(argv)
    tree = _take(argv, "--tree")
    plan_json = _take(argv, "--confine")
    if tree is not None:
        try:
            keeper.keep(tree)  # from here on this is the candidate's process; its keeper waits above it
        except keeper.JailFailed as exc:
            print(f"cudagent: the jail could not be entered: {exc}", flush=True)
            os._exit(keeper.EXIT_NO_JAIL)
    if plan_json is not None:
        isolation.drop_privileges()
        try:
            confine.enter(confine.Plan.from_json(plan_json))
        except confine.Unconfined as exc:
            print(f"cudagent: strict confinement is not available here: {exc}", flush=True)
            os._exit(confine.EXIT_UNCONFINED)
    if argv and argv[0] == "--exec":
        os.execvp(argv[1], argv[1:])
    import cudagent.evaluator.child as child  # torch, and everything else, only now

    child.main(argv)


if __name__ == "__main__":
    # through the module's own name: run as __main__ this file is a second copy of the module
    import cudagent.evaluator.jail.entry

    cudagent.evaluator.jail.entry.run_child(sys.argv[1:])
