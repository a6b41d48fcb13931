import torch
import torch.nn as nn


class Model(nn.Module):
    """A small linear layer: weights a candidate may lay out differently, once, when they are loaded."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(x)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [256, 128]
