import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>

torch::Tensor vadd(torch::Tensor a, torch::Tensor b, double alpha) {
    auto out = torch::empty_like(a);
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = static_cast<float>(alpha) * pa[i] + pb[i];
    return out;
}
"""

vadd_ext = load_inline(name="vadd_inline_cpu", cpp_sources=cpp_source, functions=["vadd"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        return vadd_ext.vadd(a, b, self.alpha)


def get_inputs():
    return [torch.randn(65536), torch.randn(65536)]
