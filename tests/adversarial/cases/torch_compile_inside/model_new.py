import torch
import torch.nn as nn

import cuda_extension  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha
        self.fn = torch.compile(lambda a, b: alpha * a + b)

    def forward(self, a, b):
        return self.fn(a, b)
