"""Scaled vector addition: alpha * a + b (a single memory-bound operator)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.alpha * a + b


N = 1 << 24


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return [2.0]
