import torch.nn as nn
from torch.utils.cpp_extension import load_inline

scale_source = """
#include <torch/extension.h>

torch::Tensor scale(torch::Tensor a, double alpha) {
    auto out = torch::empty_like(a);
    const float* pa = a.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = static_cast<float>(alpha) * pa[i];
    return out;
}
"""

add_source = """
#include <torch/extension.h>

torch::Tensor add_into(torch::Tensor x, torch::Tensor b) {
    float* px = x.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) px[i] += pb[i];
    return x;
}
"""

scale_ext = load_inline(name="own_scale_cpu", cpp_sources=scale_source, functions=["scale"], verbose=False)
add_ext = load_inline(name="own_add_cpu", cpp_sources=add_source, functions=["add_into"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        return add_ext.add_into(scale_ext.scale(a, self.alpha), b)
