"""Benchmark: how long the CLI takes to answer what needs no work: `--help` (the root's and every command's) and a
mistyped path (one sentence, exit 2). torch and the evaluator are imported only when a command needs them, so each
should be well under its target (0.5 s for help, 1 s for a refusal). Measured as a user runs it, with Python's
bytecode cache written and read (PYTHONDONTWRITEBYTECODE unset), and again with the cache off (every module of
cudagent compiled from source at each start, its dependencies' caches kept: a machine that sets the variable, as
this one's sandbox does).

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


def timed(cmd: list[str], runs: int, code: int, env: dict) -> dict:
    subprocess.run(cmd, capture_output=True, env=env)  # warm the file cache (and write the bytecode cache)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, env=env)
        times.append(time.perf_counter() - start)
        if done.returncode != code:
            raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}, not {code}: {done.stderr[-300:]!r}")
    median, most, least = statistics.median(times), max(times), min(times)
    return {"median_s": round(median, 4), "max_s": round(most, 4), "min_s": round(least, 4)}


def measure(base: list[str], runs: int, env: dict) -> dict:
    results = {"help": {}, "refusal": {}}
    results["help"]["cudagent --help"] = timed(base + ["--help"], runs, 0, env)
    for command in COMMANDS:
        results["help"][f"cudagent {command} --help"] = timed(base + [command, "--help"], runs, 0, env)
    for name, argv in REFUSALS.items():
        results["refusal"][name] = timed(base + argv, runs, 2, env)
    return results


def worst(results: dict) -> tuple[float, float]:
    return tuple(max(r["median_s"] for r in results[kind].values()) for kind in ("help", "refusal"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cli_startup.json"))
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    exe = shutil.which("cudagent")
    base = [exe] if exe else [sys.executable, "-m", "cudagent"]
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    uncached = {**cached, "PYTHONDONTWRITEBYTECODE": "1"}
    for stale in (ROOT / "cudagent").rglob("__pycache__"):
        shutil.rmtree(stale)
    without_cache = measure(base, args.runs, uncached)
    results = measure(base, args.runs, cached)
    worst_help, worst_refusal = worst(results)
    out = {
        "runs_each": args.runs,
        "targets_s": {"help": 0.5, "refusal": 1.0},
        "worst_median_s": {"help": worst_help, "refusal": worst_refusal},
        "worst_median_s_without_bytecode_cache": dict(zip(("help", "refusal"), worst(without_cache))),
        "machine": {
            "cpus": os.cpu_count(),
            "load_1min": round(os.getloadavg()[0], 2),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "bytecode_cache": "written and read (the figures above); without it in *_without_bytecode_cache",
        },
        **results,
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    slow_help, slow_refusal = worst(without_cache)
    print(
        f"worst median: help {worst_help * 1e3:.0f} ms, a refusal {worst_refusal * 1e3:.0f} ms (without the bytecode "
        f"cache: {slow_help * 1e3:.0f} ms, {slow_refusal * 1e3:.0f} ms) -> {args.out}"
    )


if __name__ == "__main__":
    main()
