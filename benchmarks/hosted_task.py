"""What hosting a task in the jail (evaluator/task_host.py, what `cudagent serve` does with a client's task) changes:
the verdict and the timings should not move; the evaluation's wall time may.

For each example task and its solution: `--rounds` evaluations with the task executed in this process (a user's own
task) and as many with it hosted in the jail, interleaved, each in a fresh evaluator with the baseline cache cleared
(so the baselines are measured each time: in-process workers, or jailed ones). Prints and writes a JSON:

    python benchmarks/hosted_task.py --device cuda --tasks softmax,row_sum --rounds 3 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def evaluate(task_name: str, device: str, hosted: bool) -> dict:
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.resources import cache_dir
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for

    shutil.rmtree(cache_dir() / "baselines", ignore_errors=True)
    task = load_task(ROOT / "examples" / "tasks" / f"{task_name}.py")
    kind = "cuda" if device == "cuda" else "cpu"
    ws = workspace_for(resolve_candidate(ROOT / "examples" / "solutions" / kind / task_name), task.source)
    start = time.monotonic()
    with Evaluator(task, resolve_device(device), EvalOptions(host_task=hosted)) as ev:
        v = ev.evaluate(ws)
    return {
        "hosted": hosted,
        "correct": v.correct,
        "tier": v.tier,
        "time_ms": v.time_ms,
        "wall_s": round(time.monotonic() - start, 2),
        "notes": v.notes,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", default="softmax")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    os.environ.setdefault("CUDAGENT_CACHE_DIR", tempfile.mkdtemp(prefix="hosted-bench-"))
    report = {"machine": platform.node(), "python": platform.python_version(), "device": args.device, "tasks": {}}
    for name in args.tasks.split(","):
        rows = []
        for _ in range(args.rounds):
            for hosted in (False, True):
                rows.append(evaluate(name, args.device, hosted))
                print(name, json.dumps(rows[-1]), flush=True)
        summary = {}
        for hosted in (False, True):
            mine = [r for r in rows if r["hosted"] == hosted]
            summary["hosted" if hosted else "in_process"] = {
                "tiers": [r["tier"] for r in mine],
                **{
                    f"{k}_ms_median": statistics.median(r["time_ms"][k] for r in mine if r["time_ms"].get(k))
                    for k in ("candidate", "eager", "compile")
                    if all(r["time_ms"].get(k) for r in mine)
                },
                "wall_s": [r["wall_s"] for r in mine],
            }
        report["tasks"][name] = {"rounds": rows, "summary": summary}
        print(name, json.dumps(summary), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
