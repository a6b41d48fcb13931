import math

import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        side = int(math.isqrt(a.shape[0]))
        a2 = a.view(side, side).unsqueeze(0)
        b2 = b.reshape(1, side, side)
        out = cuda_extension.axpby(a2.squeeze(0).contiguous(), b2[0], self.alpha)
        spare = torch.empty(out.shape, device=out.device)  # allocated, unused
        del spare
        return out.flatten()
