import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean squared difference of independent uniforms: 1/6 on stock inputs, within 1e-2 every draw."""

    def forward(self, a, b):
        return ((a - b) ** 2).mean()


def get_inputs():
    return [torch.rand(1 << 18), torch.rand(1 << 18)]


def get_init_inputs():
    return []
