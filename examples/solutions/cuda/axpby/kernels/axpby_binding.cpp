#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t axpby_launch(float* out, const float* a, const float* b, float alpha, int64_t n, int sm_count,
                                    cudaStream_t stream);

static torch::Tensor axpby_forward(torch::Tensor a, torch::Tensor b, double alpha) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "axpby_forward: expected CUDA tensors");
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "axpby_forward: expected contiguous tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "axpby_forward: float32 only");
    TORCH_CHECK(a.sizes() == b.sizes(), "axpby_forward: a and b differ in shape");
    const c10::cuda::CUDAGuard guard(a.device());
    auto out = torch::empty_like(a);
    int sm_count = 0;
    cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, a.get_device());
    const cudaError_t err = axpby_launch(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(),
                                         static_cast<float>(alpha), a.numel(), sm_count,
                                         c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "axpby kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

static void register_axpby(pybind11::module& m) {
    m.def("axpby_forward", &axpby_forward, "alpha * a + b", py::arg("a"), py::arg("b"), py::arg("alpha"));
}

REGISTER_BINDING(axpby, register_axpby);
