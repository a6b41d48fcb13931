#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "binding_registry.h"

extern "C" cudaError_t row_sum_launch(float* y, const float* x, int64_t rows, int64_t cols, cudaStream_t stream);

static torch::Tensor row_sum_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32 && x.dim() >= 1,
                "row_sum_forward: expected a contiguous float32 CUDA tensor");
    const c10::cuda::CUDAGuard guard(x.device());
    auto sizes = x.sizes().vec();
    const int64_t cols = sizes.back();
    sizes.pop_back();
    auto y = torch::empty(sizes, x.options());
    const cudaError_t err = row_sum_launch(y.data_ptr<float>(), x.data_ptr<float>(), x.numel() / std::max<int64_t>(cols, 1),
                                           cols, c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "row_sum kernel launch failed: ", cudaGetErrorString(err));
    return y;
}

static void register_row_sum(pybind11::module& m) { m.def("row_sum_forward", &row_sum_forward); }

REGISTER_BINDING(row_sum, register_row_sum);
