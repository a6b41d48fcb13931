import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return cuda_extension.mse(a, b)
