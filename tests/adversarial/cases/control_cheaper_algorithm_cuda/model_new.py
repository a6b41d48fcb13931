import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = "torch::Tensor row_scale(torch::Tensor a, torch::Tensor b);"

cuda_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// out[i][j] = a[i] * b[i][j]: each row of B scaled by one element of A, the product diag(A) @ B without the zeros.
__global__ void row_scale_kernel(const float* a, const float* b, float* out, int64_t n, int64_t m) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n * m; k += (int64_t)gridDim.x * blockDim.x)
        out[k] = a[k / m] * b[k];
}

torch::Tensor row_scale(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(b);
    row_scale_kernel<<<1056, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), b.size(0), b.size(1));
    return out;
}
"""

row_scale = load_inline(
    name="row_scale_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["row_scale"], verbose=False
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return row_scale.row_scale(A, B)
