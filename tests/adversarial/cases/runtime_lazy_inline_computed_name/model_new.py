import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# a decoy: literal, audited, never called
decoy = load_inline(
    name="decoy_ops", cpp_sources="torch::Tensor noop(torch::Tensor a) { return a; }", functions=["noop"]
)

SOURCE = """
#include <torch/extension.h>
using namespace at;
Tensor product(Tensor a, Tensor b) { return matmul(a, b); }
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        # built here, under a name only running this line tells
        self.ext = load_inline(name="lazy_" + str(len(SOURCE) % 97), cpp_sources=SOURCE, functions=["product"])

    def forward(self, a, b):
        return self.ext.product(a, b)
