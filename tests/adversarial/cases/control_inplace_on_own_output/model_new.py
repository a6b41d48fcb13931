import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        out = cuda_extension.scale(a, self.alpha)
        cuda_extension.axpby_(out, b, 1.0)  # out <- b + out
        return out
