"""Benchmark: how long `cudagent --help` takes to answer (torch is imported lazily, so it should be well under 0.5 s).

python benchmarks/cli_startup.py [--out benchmarks/results/cli_startup.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = 20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cli_startup.json"))
    args = parser.parse_args()
    exe = shutil.which("cudagent")
    cmd = [exe, "--help"] if exe else [sys.executable, "-m", "cudagent", "--help"]
    subprocess.run(cmd, capture_output=True, check=True)  # warm the file cache
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    out = {
        "command": " ".join(Path(c).name if i == 0 else c for i, c in enumerate(cmd)),
        "runs": RUNS,
        "median_s": statistics.median(times),
        "max_s": max(times),
        "min_s": min(times),
        "target_s": 0.5,
        "python": sys.version.split()[0],
    }
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"cudagent --help: median {out['median_s'] * 1e3:.0f} ms, max {out['max_s'] * 1e3:.0f} ms -> {args.out}")


if __name__ == "__main__":
    main()
