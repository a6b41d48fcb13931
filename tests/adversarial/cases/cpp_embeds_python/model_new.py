import torch.nn as nn

import cuda_extension

cuda_extension.patch()


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        return self.alpha * a + b
