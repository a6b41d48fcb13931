"""A small multi-layer model: a pre-norm transformer MLP block, x + W2 gelu(W1 layernorm(x) + b1) + b2."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(self.norm(x))
        h = nn.functional.gelu(h)
        return x + self.fc2(h)


tokens, dim, hidden = 4096, 1024, 4096


def get_inputs():
    return [torch.randn(tokens, dim)]


def get_init_inputs():
    return [dim, hidden]
