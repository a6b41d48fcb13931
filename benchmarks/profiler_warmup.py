"""Benchmark: what the first profiler session of a fresh process costs, the set-up that a candidate's process does
in the background before its verification (runtime_audit.warm_profiler) and that a verification waits for when it
starts too soon. Each order runs in a fresh interpreter: the CUDA context first, then profiler sessions (CPU
activity only, or CPU and CUDA), twice each.

    python benchmarks/profiler_warmup.py [--runs 3]     (needs a GPU)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

PROBE = r"""
import json, sys, time
import torch
from torch.profiler import ProfilerActivity, profile

out = {}
t = time.monotonic()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
out["cuda_context_s"] = time.monotonic() - t
for i, kinds in enumerate(sys.argv[1].split(",")):
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if kinds == "cuda" else [])
    t = time.monotonic()
    with profile(activities=acts):
        torch.ones(4, device="cuda").sum().item()
    out[f"session{i + 1}_{kinds}_s"] = time.monotonic() - t
print(json.dumps(out))
"""

ORDERS = ("cpu,cpu,cuda,cuda", "cuda,cuda")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for run in range(args.runs):
        for order in ORDERS:
            proc = subprocess.run([sys.executable, "-c", PROBE, order], capture_output=True, text=True, timeout=300)
            line = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 else proc.stderr[-500:]
            figures = json.loads(line) if proc.returncode == 0 else {"error": line}
            print(
                f"run {run + 1} {order}: "
                + ", ".join(f"{k} {v:.2f}" for k, v in figures.items() if isinstance(v, float))
                + figures.get("error", ""),
                flush=True,
            )


if __name__ == "__main__":
    main()
