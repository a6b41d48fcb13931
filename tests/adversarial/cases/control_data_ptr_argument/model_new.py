import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        out = torch.empty_like(a)
        cuda_extension.axpby_ptr(out.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel(), self.alpha)
        return out
