#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "binding_registry.h"

extern "C" cudaError_t softmax_launch(float* y, const float* x, int64_t rows, int64_t cols, cudaStream_t stream);

static torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "softmax_forward: expected a contiguous float32 CUDA tensor");
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "softmax_forward: empty last dimension");
    const c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    const cudaError_t err = softmax_launch(y.data_ptr<float>(), x.data_ptr<float>(), x.numel() / cols, cols,
                                           c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "softmax kernel launch failed: ", cudaGetErrorString(err));
    return y;
}

static void register_softmax(pybind11::module& m) { m.def("softmax_forward", &softmax_forward); }

REGISTER_BINDING(softmax, register_softmax);
