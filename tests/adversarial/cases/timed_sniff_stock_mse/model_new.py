import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def forward(self, a, b):
        return cuda_extension.mse(a, b)
