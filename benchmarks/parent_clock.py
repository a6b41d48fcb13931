"""The reward's clock (evaluator/timing/parent_clock.py) on real tasks: what it measures beside the in-process clock,
what it costs, and what it does to a candidate that forges the in-process clock.

For each example task and its solution, `--rounds` evaluations in one evaluator (the baselines measured once, as a
user's second check finds them): the tier, each target's time per call by the parent's clock and by the in-process
samples, their ratio, and the seconds the timing took with and without the parent's batches. Then the adversarial
case `timing_forged_clock` (its perf_counter and CUDA events re-pointed to hide 97% of its time): the verdict, and the
tier the in-process figures alone would have given it (what the reward was before the parent's clock).

    python benchmarks/parent_clock.py --device cuda --rounds 3 --out results.json
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "adversarial"))


def row(v) -> dict:
    from cudagent.evaluator.verdict import reward_tier

    timing = v.timing or {}
    inproc = {t: (m["event_ms"]["median"] if m else None) for t, m in (timing.get("targets") or {}).items()}
    parent = (timing.get("parent_clock") or {}).get("ms_per_call") or {}
    seconds = v.seconds
    return {
        "correct": v.correct,
        "tier": v.tier,
        "codes": v.codes,
        "violations": [x.message for x in v.violations],
        "parent_ms": parent,
        "in_process_ms": inproc,
        "parent_over_in_process": {t: parent[t] / inproc[t] for t in parent if inproc.get(t)},
        "tier_by_in_process_figures": (
            reward_tier(True, inproc.get("candidate"), inproc.get("eager"), inproc.get("compile"), 0.05)
            if inproc.get("candidate")
            else None
        ),
        "timing_s": seconds.get("timing"),
        "parent_clock_s": seconds.get("timing_parent_clock"),
        "timing_without_parent_clock_s": (
            round(seconds["timing"] - seconds["timing_parent_clock"], 3)
            if seconds.get("timing") is not None and seconds.get("timing_parent_clock") is not None
            else None
        ),
        "batches": {
            t: {"n": c["n"], "fixed_ms": round(c["round_trip_ms"], 3)}
            for t, c in ((timing.get("parent_clock") or {}).get("targets") or {}).items()
        },
        "notes": v.notes,
    }


def examples(device: str, tasks: list[str], rounds: int) -> dict:
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for

    kind = "cuda" if device == "cuda" else "cpu"
    out = {}
    for name in tasks:
        task = load_task(ROOT / "examples" / "tasks" / f"{name}.py")
        rows = []
        with Evaluator(task, resolve_device(device), EvalOptions()) as ev:
            for _ in range(rounds):
                ws = workspace_for(resolve_candidate(ROOT / "examples" / "solutions" / kind / name), task.source)
                rows.append(row(ev.evaluate(ws)))
                print(name, json.dumps(rows[-1]), flush=True)
        ratios = [r["parent_over_in_process"].get("candidate") for r in rows if r["parent_over_in_process"]]
        out[name] = {
            "rounds": rows,
            "tiers": [r["tier"] for r in rows],
            "candidate_parent_over_in_process_median": statistics.median(ratios) if ratios else None,
            "parent_clock_s_median": statistics.median(r["parent_clock_s"] for r in rows if r["parent_clock_s"]),
            "timing_without_parent_clock_s_median": statistics.median(
                r["timing_without_parent_clock_s"] for r in rows if r["timing_without_parent_clock_s"] is not None
            ),
        }
    return out


def forged(device: str, rounds: int) -> list[dict]:
    from harness import Runner, load_cases

    (case,) = [c for c in load_cases(device) if c.name == "timing_forged_clock"]
    runner = Runner(device, Path(tempfile.mkdtemp(prefix="forged-")))
    try:
        rows = []
        root = runner.scratch / f"{case.name}-{device}"
        for i in range(rounds):
            if root.exists():  # each round in a workspace of its own (the last one's files are read-only)
                moved = root.rename(root.with_name(f"{root.name}-{i}"))
                runner.built = {k: (moved if v == root else v) for k, v in runner.built.items()}
            rows.append(row(runner.run(case)))
            print("timing_forged_clock", json.dumps(rows[-1]), flush=True)
        return rows
    finally:
        runner.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", default="axpby,softmax,row_sum,matmul")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    os.environ.setdefault("CUDAGENT_CACHE_DIR", tempfile.mkdtemp(prefix="parent-clock-"))
    report = {"machine": platform.node(), "python": platform.python_version(), "device": args.device}
    report["forged_clock"] = forged(args.device, args.rounds)
    report["examples"] = examples(args.device, args.tasks.split(","), args.rounds)
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
