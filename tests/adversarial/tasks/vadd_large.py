"""vadd at 2**24 floats: 64 MB outputs, blocks glibc would map afresh but the evaluator's processes keep in their heap
(cudagent/evaluator/heap.py): stale memory of this size is recycled too."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        return self.alpha * a + b


def get_inputs():
    return [torch.randn(1 << 24), torch.randn(1 << 24)]


def get_init_inputs():
    return [2.0]
