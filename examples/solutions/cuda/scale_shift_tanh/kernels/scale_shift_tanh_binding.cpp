#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t scale_shift_tanh_launch(float* y, const float* x, const float* scale, const float* shift,
                                               int64_t n, int64_t channels, int sm_count, cudaStream_t stream);

static torch::Tensor scale_shift_tanh_forward(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "scale_shift_tanh_forward: expected a contiguous float32 CUDA tensor");
    const int64_t channels = x.size(-1);
    TORCH_CHECK(scale.numel() == channels && shift.numel() == channels, "scale_shift_tanh_forward: parameter sizes");
    const c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty_like(x);
    int sm_count = 0;
    cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, x.get_device());
    const cudaError_t err = scale_shift_tanh_launch(y.data_ptr<float>(), x.data_ptr<float>(), scale.data_ptr<float>(),
                                                    shift.data_ptr<float>(), x.numel(), channels, sm_count,
                                                    c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "scale_shift_tanh kernel launch failed: ", cudaGetErrorString(err));
    return y;
}

static void register_sst(pybind11::module& m) { m.def("scale_shift_tanh_forward", &scale_shift_tanh_forward); }

REGISTER_BINDING(scale_shift_tanh, register_sst);
