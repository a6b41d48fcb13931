#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t matmul_launch(const float* a, const float* b, float* c, int m, int n, int k,
                                     cudaStream_t stream);

static torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.dim() == 2 && b.dim() == 2, "matmul_forward: expected 2-D CUDA tensors");
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "matmul_forward: expected contiguous tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "matmul_forward: float32 only");
    TORCH_CHECK(a.size(1) == b.size(0), "matmul_forward: inner dimensions differ");
    const c10::cuda::CUDAGuard guard(a.device());
    auto c = torch::empty({a.size(0), b.size(1)}, a.options());
    const cudaError_t err = matmul_launch(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(),
                                          static_cast<int>(a.size(0)), static_cast<int>(b.size(1)),
                                          static_cast<int>(a.size(1)), c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "matmul kernel launch failed: ", cudaGetErrorString(err));
    return c;
}

static void register_matmul(pybind11::module& m) { m.def("matmul_forward", &matmul_forward); }

REGISTER_BINDING(matmul, register_matmul);
