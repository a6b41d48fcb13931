"""The task's cost (bytes moved, FLOPs of the reference) as the roofline counts it: the same FLOPs as torch's
FlopCounterMode, counted without importing torch._dynamo into the evaluator's parent (FlopCounterMode's first call
does: ~2 CPU-s in every evaluation, where nothing is compiled)."""

from __future__ import annotations

import subprocess
import sys

import torch
from torch.utils.flop_counter import FlopCounterMode

from cudagent.evaluator.timing.roofline import task_cost


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.proj = torch.nn.Linear(8 * 6 * 6, 16)

    def forward(self, x, y):
        h = torch.relu(self.conv(x)).flatten(1)
        q = self.proj(h)
        return torch.bmm(q.unsqueeze(0), y), torch.nn.functional.scaled_dot_product_attention(q[None], q[None], q[None])


def test_the_cost_counts_the_flops_torch_counts():
    model, inputs = Mixed(), [torch.randn(4, 3, 8, 8), torch.randn(1, 16, 5)]
    torch_counter = FlopCounterMode(display=False)
    with torch.no_grad(), torch_counter:
        output = model(*inputs)
    cost = task_cost(model, inputs, output)
    assert cost.flops == torch_counter.get_total_flops() > 0
    params = sum(p.numel() for p in model.parameters()) * 4
    assert cost.bytes == sum(t.numel() * 4 for t in [*inputs, *output]) + params


def test_counting_the_cost_imports_no_compiler():
    script = """
import sys, torch
from cudagent.evaluator.timing.roofline import task_cost
model = torch.nn.Linear(64, 32)
x = torch.randn(8, 64)
print(task_cost(model, [x], model(x)).flops, "torch._dynamo" in sys.modules)
"""
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert ran.stdout.split() == [str(2 * 8 * 64 * 32), "False"], ran.stderr[-2000:]
