"""Sum over the last dimension (a pure reduction)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=-1)


rows, cols = 4096, 8192


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
