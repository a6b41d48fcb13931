"""The scripted attention kernel alone: timed beside PyTorch's own attention on issue 47's shapes, or one launch of
each shape for Nsight Compute.

    python benchmarks/attention_profile.py --time [--variant bn128]       # medians of CUDA-event timings, one process
    ncu --clock-control none --kernel-name regex:causal_attention_kernel --launch-skip 2 --launch-count 2 \
        --section SpeedOfLight --section WarpStateStats ... python benchmarks/attention_profile.py [--variant bn128]

Issue 47's shapes: Llama's attention region (q [16, 1024, 2048], k and v [16, 1024, 512], rotary tables) and GPT-2's
(q, k, v [32, 12, 1024, 64]); each op called three times (the first two are skipped by the command above). `--time`
times, interleaved, the kernel (`rotary_attention` includes k's rotary pass), SDPA's causal path on the same q, k, v
(k and v repeated to the query's heads, as the model does) and SDPA with the traced boolean mask."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from attention_putback import build  # benchmarks/ is on the path when a script in it runs


def inputs():
    import torch

    torch.manual_seed(0)
    q = torch.randn(16, 1024, 2048, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(16, 1024, 512, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    angles = torch.arange(1024, device="cuda")[:, None] * torch.rand(64, device="cuda")[None]
    cos = torch.cat([angles.cos()] * 2, -1).to(torch.bfloat16)[None, None]
    sin = torch.cat([angles.sin()] * 2, -1).to(torch.bfloat16)[None, None]
    gpt2 = [torch.randn(32, 12, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    return (q, k, v, cos, sin), gpt2


def timed(calls: dict, rounds: int = 15, reps: int = 20) -> dict[str, float]:
    """ms a call of each, the median of `rounds` interleaved rounds of `reps` calls each"""
    import torch

    samples: dict[str, list[float]] = {name: [] for name in calls}
    for fn in calls.values():
        fn()
    for _ in range(rounds):
        for name, fn in calls.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) / reps)
    return {name: round(statistics.median(s), 4) for name, s in samples.items()}


def main() -> None:
    import torch
    import torch.nn.functional as F

    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", default="bn128")
    parser.add_argument("--build", default="/tmp/attention-putback")
    parser.add_argument("--time", action="store_true")
    a = parser.parse_args()
    ops = getattr(torch.ops, build(a.variant, Path(a.build) / a.variant))
    (q, k, v, cos, sin), gpt2 = inputs()
    if not a.time:
        for _ in range(3):
            ops.rotary_attention(q, k, v, cos, sin, 128**-0.5)
        for _ in range(3):
            ops.causal_attention(*gpt2, 0.125)
        torch.cuda.synchronize()
        return
    qh = q.view(16, 1024, 16, 128).transpose(1, 2)
    kh, vh = (t.view(16, 1024, 4, 128).transpose(1, 2).repeat_interleave(4, 1) for t in (k, v))
    mask = torch.ones(1024, 1024, device="cuda", dtype=torch.bool).tril()
    llama = timed(
        {
            "kernel": lambda: ops.rotary_attention(q, k, v, cos, sin, 128**-0.5),
            "sdpa_causal": lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=True),
            "sdpa_mask": lambda: F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask),
        }
    )
    g = timed(
        {
            "kernel": lambda: ops.causal_attention(*gpt2, 0.125),
            "sdpa_causal": lambda: F.scaled_dot_product_attention(*gpt2, is_causal=True),
        }
    )
    print(json.dumps({"variant": a.variant, "device": torch.cuda.get_device_name(), "llama_ms": llama, "gpt2_ms": g}))


if __name__ == "__main__":
    main()
