#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cublasStatus_t gemm_xwt(cublasHandle_t handle, cudaStream_t stream, int m, int n, int k, const float* x,
                                   const float* w, float* y);
extern "C" cudaError_t bias_gelu_tanh_launch(float* y, const float* bias, int64_t rows, int64_t cols,
                                             cudaStream_t stream);

static torch::Tensor linear_gelu_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32 && x.dim() == 2,
                "linear_gelu_forward: expected a contiguous 2-D float32 CUDA tensor");
    TORCH_CHECK(w.is_contiguous() && w.dim() == 2 && w.size(1) == x.size(1) && b.numel() == w.size(0),
                "linear_gelu_forward: weight and bias do not match the input");
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
    auto y = torch::empty({m, n}, x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    const cublasStatus_t st = gemm_xwt(at::cuda::getCurrentCUDABlasHandle(), stream, (int)m, (int)n, (int)k,
                                       x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>());
    TORCH_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLAS GEMM failed with status ", (int)st);
    const cudaError_t err = bias_gelu_tanh_launch(y.data_ptr<float>(), b.data_ptr<float>(), m, n, stream);
    TORCH_CHECK(err == cudaSuccess, "bias_gelu kernel launch failed: ", cudaGetErrorString(err));
    return y;
}

static void register_linear_gelu(pybind11::module& m) { m.def("linear_gelu_forward", &linear_gelu_forward); }

REGISTER_BINDING(linear_gelu, register_linear_gelu);
