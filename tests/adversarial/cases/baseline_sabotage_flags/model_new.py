import torch
import torch.nn as nn

import cuda_extension

torch.backends.cudnn.enabled = False
torch.backends.cuda.matmul.allow_tf32 = False


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        return cuda_extension.axpby(a, b, self.alpha)
