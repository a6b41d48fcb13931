"""Scaled vector addition, alpha * a + b, sized for the Quickstart's run on a CPU: 4M floats (16 MB) a vector, past
a core's own caches, so the kernel is still memory-bound. examples/tasks/axpby.py is the same task at a GPU's size
(16M floats), where a CPU's evaluation moves four times the data in every trial and timed call: its run takes 1.5
to 3 minutes on two cores, this one under one."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.alpha * a + b


N = 1 << 22


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return [2.0]
