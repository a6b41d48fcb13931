"""A fused elementwise chain with a learned per-channel scale and shift: tanh(x * scale + shift) * 0.5 + x."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(channels))
        self.shift = nn.Parameter(torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(x * self.scale + self.shift)
        return y * 0.5 + x


rows, channels = 8192, 2048


def get_inputs():
    return [torch.randn(rows, channels)]


def get_init_inputs():
    return [channels]
