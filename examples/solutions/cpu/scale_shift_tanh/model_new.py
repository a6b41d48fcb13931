import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(channels))
        self.shift = nn.Parameter(torch.empty(channels))

    def forward(self, x):
        return cuda_extension.scale_shift_tanh_forward(x, self.scale, self.shift)
