"""What an evaluation's timing costs, with whichever cudagent is first on the path: run it once with the code before a
change and once after, on the same machine in one call, and compare (issue 46: the parent's clock and the sampled
batches add work to every timed evaluation).

For each example task and its solution, one evaluator: a first evaluation (the baselines measured), then `--evals`
more, as a training run or a user's second check finds the machine; each one's tier, its timing seconds and its
total seconds; medians, smallest and largest.

    PYTHONPATH=/path/to/cudagent-before python benchmarks/timing_cost.py --device cuda --evals 3 --out before.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:  # the cudagent on the path (the side being measured), else this checkout's
    import cudagent  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT))


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def main() -> None:
    import cudagent
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", default="axpby,softmax,row_sum,matmul")
    parser.add_argument("--evals", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    os.environ.setdefault("CUDAGENT_CACHE_DIR", tempfile.mkdtemp(prefix="timing-cost-"))
    kind = "cuda" if args.device == "cuda" else "cpu"
    report = {"cudagent": str(Path(cudagent.__file__).parent), "machine": platform.node(), "tasks": {}}
    for name in args.tasks.split(","):
        task = load_task(ROOT / "examples" / "tasks" / f"{name}.py")
        rows = []
        with Evaluator(task, resolve_device(args.device), EvalOptions()) as ev:
            for i in range(1 + args.evals):
                ws = workspace_for(resolve_candidate(ROOT / "examples" / "solutions" / kind / name), task.source)
                v = ev.evaluate(ws)
                r = {
                    "tier": v.tier,
                    "codes": v.codes,
                    "timing_s": v.seconds.get("timing"),
                    "total_s": v.seconds["total"],
                }
                print(name, "first" if i == 0 else i, json.dumps(r), flush=True)
                if i:
                    rows.append(r)
        timed = [r["timing_s"] for r in rows if r["timing_s"] is not None]
        report["tasks"][name] = {
            "evaluations": rows,
            "tiers": [r["tier"] for r in rows],
            "timing_s": spread(timed) if timed else None,
            "total_s": spread([r["total_s"] for r in rows]),
        }
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
