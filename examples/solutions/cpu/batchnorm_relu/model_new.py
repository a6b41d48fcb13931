import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)  # parameters and running statistics, as in the reference

    def forward(self, x):
        bn = self.bn
        return cuda_extension.bn_relu_forward(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.eps)
