import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return cuda_extension.row_mean(x)
