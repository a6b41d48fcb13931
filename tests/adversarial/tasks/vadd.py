import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        return self.alpha * a + b


def get_inputs():
    return [torch.randn(65536), torch.randn(65536)]


def get_init_inputs():
    return [2.0]
