import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Has an extension (so the link audit sees compiled code) but never calls it: a Python-only path that uses
    allowed views and a forbidden-free trick would pass on the CPU if nothing checked that its own code ran."""

    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha
        self.unused = cuda_extension.axpby

    def forward(self, a, b):
        return b.new_full(b.shape, 0.0)  # allocation only: wrong values, and no own code ran
