import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Keeps the reference's parameters, and a transposed copy of the weight made whenever weights are loaded."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.register_buffer("weight_t", self.linear.weight.detach().t().contiguous(), persistent=False)
        self.register_load_state_dict_post_hook(lambda module, keys: module.refresh())

    def refresh(self):
        self.weight_t = self.linear.weight.detach().t().contiguous()

    def forward(self, x):
        return cuda_extension.linear_t(x, self.weight_t, self.linear.bias)
