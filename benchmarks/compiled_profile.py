"""Where a compiled model's GPU time goes, kernel by kernel: what is left for a custom kernel to win over
torch.compile (issue 47's models, built as benchmarks/alternatives.py builds them).

    python benchmarks/compiled_profile.py --model llama|gpt2 [--mode default] [--calls 5] [--out F]

The model is compiled in `mode` and made ready as the proof makes it, then `calls` calls run under torch.profiler;
each CUDA kernel's time is summed and divided by the calls, and kernels are grouped by what they are (a GEMM, an
attention kernel, a Triton kernel inductor generated, other). One JSON object: the groups, the 25 costliest kernels,
and the GPU time a call against its wall time.
"""

from __future__ import annotations

import argparse
import re
import time
from collections import defaultdict

from alternatives import MODELS, built_model, emit  # benchmarks/ is on the path when a script in it runs

GROUPS = (
    ("gemm", re.compile(r"gemm|cutlass|sm90_xmma|nvjet|cublas", re.I)),
    ("attention", re.compile(r"fmha|flash|attention|efficient_attention", re.I)),
    ("triton", re.compile(r"^triton_", re.I)),
)


def group_of(kernel: str) -> str:
    return next((name for name, pattern in GROUPS if pattern.search(kernel)), "other")


def main() -> None:
    import torch

    from cudagent.usermodel.alternatives import prepared

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--mode", default="default")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--out")
    a = parser.parse_args()
    model, ids = built_model(a.model)
    fn = prepared(model, a.mode, (ids,), {})
    found = {"model": a.model, "inputs": list(ids.shape), "mode": a.mode, "device": torch.cuda.get_device_name()}
    found.update(torch=torch.__version__, **kernel_profile(fn, (ids,), a.calls, top=25))
    emit(found, a.out)


def kernel_profile(fn, args: tuple, calls: int = 5, top: int = 8) -> dict:
    """fn(*args)'s CUDA kernels over `calls` calls after three warm-ups (torch.profiler): the wall time and the GPU
    time a call, the time each group of kernels takes, and the `top` costliest kernels."""
    import torch

    with torch.no_grad():
        for _ in range(3):
            fn(*args)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            torch.cuda.synchronize()
            wall_ms = (time.perf_counter() - start) * 1e3 / calls
    per_kernel: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[event.name] += event.device_time / 1e3 / calls
    groups: dict[str, float] = defaultdict(float)
    for name, ms in per_kernel.items():
        groups[group_of(name)] += ms
    costliest = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:top]
    return {
        "wall_ms": round(wall_ms, 4),
        "gpu_ms": round(sum(per_kernel.values()), 4),
        "groups_ms": {k: round(v, 4) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
        "top": [{"kernel": name[:160], "group": group_of(name), "ms": round(ms, 4)} for name, ms in costliest],
    }


if __name__ == "__main__":
    main()
