import torch
import torch.nn as nn


class Model(nn.Module):
    """mean(a * b) of independent standard normals: about 0 on stock inputs, not in general."""

    def forward(self, a, b):
        return (a * b).mean()


def get_inputs():
    return [torch.randn(1 << 18), torch.randn(1 << 18)]


def get_init_inputs():
    return []
