import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha
        self.register_buffer("scratch", torch.empty(65536), persistent=False)

    def forward(self, a, b):
        return cuda_extension.axpby_scratch(a, b, self.alpha, self.scratch)
