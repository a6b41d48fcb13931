import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void vadd_kernel(const float* a, const float* b, float* out, float alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = alpha * a[i] + b[i];
}

torch::Tensor vadd_cuda(torch::Tensor a, torch::Tensor b, double alpha) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    vadd_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), alpha, n);
    return out;
}
"""

cpp_source = "torch::Tensor vadd_cuda(torch::Tensor a, torch::Tensor b, double alpha);"

vadd_ext = load_inline(
    name="vadd_inline_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["vadd_cuda"], verbose=False
)


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        return vadd_ext.vadd_cuda(a, b, self.alpha)
