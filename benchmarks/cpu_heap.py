"""What a CPU call pays for page faults, with glibc's default heap and with the evaluator's kept heap
(cudagent/evaluator/heap.py). Each round starts a fresh Python process per setting, in turn, that times a
KernelBench-sized call (axpby's `alpha * a + b` on 2**24 floats, a fresh 64 MB output each call) in a thread of its
own, as the evaluator's processes run it; the rounds interleave the settings so drifts of the machine hit both.

    python benchmarks/cpu_heap.py --rounds 5 --out benchmarks/results/suite/stop58-cpu-heap.log
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cudagent.evaluator.heap import KEEP_HEAP  # noqa: E402

CALL = """
import os, threading, time, torch
torch.set_num_threads(1)
def work():
    a, b = torch.randn(1 << 24), torch.randn(1 << 24)
    for _ in range(3):
        c = 2.0 * a + b
    t, r = time.perf_counter(), os.times()
    for _ in range(20):
        c = 2.0 * a + b
    r2 = os.times()
    print((time.perf_counter() - t) / 20 * 1e3, (r2.system - r.system) / 20 * 1e3)
th = threading.Thread(target=work); th.start(); th.join()
"""


def _one(tunables: str | None) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    out = subprocess.run([sys.executable, "-c", CALL], env=env, capture_output=True, text=True, check=True).stdout
    ms, sys_ms = (float(x) for x in out.split())
    return ms, sys_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    settings = {"glibc default": None, "kept heap (KEEP_HEAP)": KEEP_HEAP}
    seen: dict[str, list[tuple[float, float]]] = {name: [] for name in settings}
    for _ in range(args.rounds):
        for name, tunables in settings.items():
            seen[name].append(_one(tunables))
    lines = [f"# {platform.node()} {os.cpu_count()} cores, {platform.platform()}; {args.rounds} rounds, interleaved"]
    for name, runs in seen.items():
        ms = [m for m, _ in runs]
        sys_ms = [s for _, s in runs]
        lines.append(
            f"{name:24s} ms a call: median {statistics.median(ms):6.1f}, min {min(ms):6.1f}, max {max(ms):6.1f};"
            f" system CPU ms a call: median {statistics.median(sys_ms):5.1f}"
        )
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
