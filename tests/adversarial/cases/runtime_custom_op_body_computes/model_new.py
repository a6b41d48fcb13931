import torch
import torch.nn as nn

import cuda_extension  # noqa: F401  (loading it registers the operator)


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        return torch.ops.cudagent_adv.vadd(a, b, self.alpha)
