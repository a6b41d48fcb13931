"""The scripted attention kernel under Nsight Compute: one launch of each shape, for what its time is made of.

    ncu --clock-control none --kernel-name regex:causal_attention_kernel --launch-skip 2 --launch-count 2 \
        --section SpeedOfLight --section WarpStateStats ... python benchmarks/attention_profile.py [--variant s3]

Issue 47's shapes: Llama's attention region (q [16, 1024, 2048], k and v [16, 1024, 512], rotary tables) and GPT-2's
(q, k, v [32, 12, 1024, 64]); each op called three times (the first two are skipped by the command above)."""

from __future__ import annotations

import argparse
from pathlib import Path

from attention_putback import build  # benchmarks/ is on the path when a script in it runs


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", default="s3")
    parser.add_argument("--build", default="/tmp/attention-putback")
    a = parser.parse_args()
    ops = getattr(torch.ops, build(a.variant, Path(a.build) / a.variant))
    torch.manual_seed(0)
    q = torch.randn(16, 1024, 2048, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(16, 1024, 512, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    angles = torch.arange(1024, device="cuda")[:, None] * torch.rand(64, device="cuda")[None]
    cos = torch.cat([angles.cos()] * 2, -1).to(torch.bfloat16)[None, None]
    sin = torch.cat([angles.sin()] * 2, -1).to(torch.bfloat16)[None, None]
    for _ in range(3):
        ops.rotary_attention(q, k, v, cos, sin, 128**-0.5)
    g = [torch.randn(32, 12, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    for _ in range(3):
        ops.causal_attention(*g, 0.125)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
