"""Benchmark: how long the CLI takes to answer what needs no work: `--help` (the root's and every command's) and a
mistyped path (one sentence, exit 2). torch and the evaluator are imported only when a command needs them, so each
should be well under its target (0.5 s for help, 1 s for a refusal).

python benchmarks/cli_startup.py [--out benchmarks/results/cli_startup.json] [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = "bench check profile doctor hotspots optimize runs log show export ledgers prune serve data train".split()
REFUSALS = {
    "optimize a missing task": ["optimize", "/nonexistent/task.py"],
    "check a missing task": ["check", "/nonexistent/task.py", "/nonexistent/solution"],
    "check a missing candidate": ["check", str(ROOT / "examples/tasks/axpby.py"), "/nonexistent/solution"],
    "hotspots a missing model file": ["hotspots", "/nonexistent/model.py:Block"],
    "hotspots an input spec with an empty dimension": [
        "hotspots",
        str(ROOT / "examples/models/block.py") + ":Stack",
        "--inputs",
        "x=f32[8,,256]",
    ],
}


def timed(cmd: list[str], runs: int, code: int) -> dict:
    subprocess.run(cmd, capture_output=True)  # warm the file cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True)
        times.append(time.perf_counter() - start)
        if done.returncode != code:
            raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}, not {code}: {done.stderr[-300:]!r}")
    median, most, least = statistics.median(times), max(times), min(times)
    return {"median_s": round(median, 4), "max_s": round(most, 4), "min_s": round(least, 4)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cli_startup.json"))
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    exe = shutil.which("cudagent")
    base = [exe] if exe else [sys.executable, "-m", "cudagent"]
    results = {"help": {}, "refusal": {}}
    results["help"]["cudagent --help"] = timed(base + ["--help"], args.runs, 0)
    for command in COMMANDS:
        results["help"][f"cudagent {command} --help"] = timed(base + [command, "--help"], args.runs, 0)
    for name, argv in REFUSALS.items():
        results["refusal"][name] = timed(base + argv, args.runs, 2)
    worst_help = max(r["median_s"] for r in results["help"].values())
    worst_refusal = max(r["median_s"] for r in results["refusal"].values())
    out = {
        "runs_each": args.runs,
        "targets_s": {"help": 0.5, "refusal": 1.0},
        "worst_median_s": {"help": worst_help, "refusal": worst_refusal},
        "machine": {
            "cpus": os.cpu_count(),
            "load_1min": round(os.getloadavg()[0], 2),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        **results,
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"worst median: help {worst_help * 1e3:.0f} ms, a refusal {worst_refusal * 1e3:.0f} ms -> {args.out}")


if __name__ == "__main__":
    main()
