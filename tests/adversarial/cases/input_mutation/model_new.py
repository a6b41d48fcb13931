import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        cuda_extension.axpby_(b, a, self.alpha)  # b <- alpha * a + b
        return cuda_extension.scale(b, 1.0)
