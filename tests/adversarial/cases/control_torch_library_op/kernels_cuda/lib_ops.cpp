// A legitimate custom operator registered with TORCH_LIBRARY and called as torch.ops.cudagent_adv.vadd: its body
// launches the candidate's own kernel on the caller's stream.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t lib_axpby(float* o, const float* a, const float* b, float alpha, int64_t n, cudaStream_t s);

static torch::Tensor vadd(const torch::Tensor& a, const torch::Tensor& b, double alpha) {
    auto out = torch::empty_like(a);
    cudaError_t e = lib_axpby(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), (float)alpha,
                              a.numel(), c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(e == cudaSuccess, "launch failed: ", cudaGetErrorString(e));
    return out;
}

TORCH_LIBRARY(cudagent_adv, m) { m.def("vadd(Tensor a, Tensor b, float alpha) -> Tensor"); }

TORCH_LIBRARY_IMPL(cudagent_adv, CUDA, m) { m.impl("vadd", &vadd); }
