#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t bn_relu_launch(float* y, const float* x, const float* w, const float* b, const float* mean,
                                      const float* var, int64_t n, int64_t c, int64_t hw, float eps,
                                      cudaStream_t stream);

static torch::Tensor bn_relu_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor mean,
                                     torch::Tensor var, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32 && x.dim() == 4,
                "bn_relu_forward: expected a contiguous float32 NCHW CUDA tensor");
    const c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty_like(x);
    const cudaError_t err = bn_relu_launch(y.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(),
                                           b.data_ptr<float>(), mean.data_ptr<float>(), var.data_ptr<float>(),
                                           x.size(0), x.size(1), x.size(2) * x.size(3), static_cast<float>(eps),
                                           c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "bn_relu kernel launch failed: ", cudaGetErrorString(err));
    return y;
}

static void register_bn_relu(pybind11::module& m) { m.def("bn_relu_forward", &bn_relu_forward); }

REGISTER_BINDING(bn_relu, register_bn_relu);
