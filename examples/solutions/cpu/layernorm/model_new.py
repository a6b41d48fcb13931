import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.norm = nn.LayerNorm(features)  # keeps the reference's parameter names (norm.weight, norm.bias)

    def forward(self, x):
        return cuda_extension.layernorm_forward(x, self.norm.weight, self.norm.bias, self.norm.eps)
