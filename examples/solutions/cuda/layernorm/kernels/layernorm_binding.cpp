#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t layernorm_launch(float* y, const float* x, const float* w, const float* b, int64_t rows,
                                        int64_t n, float eps, cudaStream_t stream);

static torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "layernorm_forward: expected a contiguous float32 CUDA tensor");
    const int64_t n = x.size(-1);
    TORCH_CHECK(w.numel() == n && b.numel() == n && w.is_contiguous() && b.is_contiguous(),
                "layernorm_forward: weight and bias must match the last dimension");
    const c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty_like(x);
    const cudaError_t err = layernorm_launch(y.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(),
                                             b.data_ptr<float>(), x.numel() / n, n, static_cast<float>(eps),
                                             c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "layernorm kernel launch failed: ", cudaGetErrorString(err));
    return y;
}

static void register_layernorm(pybind11::module& m) { m.def("layernorm_forward", &layernorm_forward); }

REGISTER_BINDING(layernorm, register_layernorm);
