#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t linear_t(float* o, const float* x, const float* wt, const float* b, int64_t m, int64_t k,
                                int64_t n, cudaStream_t s);

static torch::Tensor linear_op(torch::Tensor x, torch::Tensor wt, torch::Tensor bias) {
    const int64_t m = x.size(0), k = x.size(1), n = wt.size(1);
    auto out = torch::empty({m, n}, x.options());
    cudaError_t e = linear_t(out.data_ptr<float>(), x.data_ptr<float>(), wt.data_ptr<float>(), bias.data_ptr<float>(),
                             m, k, n, c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(e == cudaSuccess, "launch failed: ", cudaGetErrorString(e));
    return out;
}

static void register_ops(pybind11::module& m) { m.def("linear_t", &linear_op); }

REGISTER_BINDING(linear_ops, register_ops);
