import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>

// out[i][j] = a[i] * b[i][j]: each row of B scaled by one element of A, the product diag(A) @ B without the zeros.
torch::Tensor row_scale(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(b);
    const int64_t n = b.size(0), m = b.size(1);
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
        const float s = pa[i];
        for (int64_t j = 0; j < m; ++j) po[i * m + j] = s * pb[i * m + j];
    }
    return out;
}
"""

row_scale = load_inline(name="row_scale_cpu", cpp_sources=cpp_source, functions=["row_scale"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return row_scale.row_scale(A, B)
