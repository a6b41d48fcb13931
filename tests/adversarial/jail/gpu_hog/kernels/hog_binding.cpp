#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t hog_vadd(float* out, const float* a, const float* b, float alpha, int64_t n,
                                cudaStream_t stream);

static torch::Tensor vadd(torch::Tensor a, torch::Tensor b, double alpha) {
    TORCH_CHECK(a.is_cuda() && a.is_contiguous() && b.is_contiguous(), "vadd: contiguous CUDA tensors");
    const c10::cuda::CUDAGuard guard(a.device());
    auto out = torch::empty_like(a);
    const cudaError_t err = hog_vadd(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(),
                                     static_cast<float>(alpha), a.numel(), c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "vadd: ", cudaGetErrorString(err));
    return out;
}

static void register_ops(pybind11::module& m) { m.def("vadd", &vadd); }

REGISTER_BINDING(hog_ops, register_ops);
