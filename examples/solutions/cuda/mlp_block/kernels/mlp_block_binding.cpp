#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cublasStatus_t gemm_xwt(cublasHandle_t handle, cudaStream_t stream, int m, int n, int k, const float* x,
                                   const float* w, float* y);
extern "C" cudaError_t mlp_layernorm(float* y, const float* x, const float* w, const float* b, int64_t rows,
                                     int64_t n, float eps, cudaStream_t s);
extern "C" cudaError_t mlp_bias_gelu(float* h, const float* bias, int64_t rows, int64_t cols, cudaStream_t s);
extern "C" cudaError_t mlp_bias_residual(float* y, const float* bias, const float* x, int64_t rows, int64_t cols,
                                         cudaStream_t s);

static void check(cudaError_t err, const char* what) {
    TORCH_CHECK(err == cudaSuccess, what, " failed: ", cudaGetErrorString(err));
}

static torch::Tensor mlp_block_forward(torch::Tensor x, torch::Tensor ln_w, torch::Tensor ln_b, double eps,
                                       torch::Tensor w1, torch::Tensor b1, torch::Tensor w2, torch::Tensor b2) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32 && x.dim() == 2,
                "mlp_block_forward: expected a contiguous 2-D float32 CUDA tensor");
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t tokens = x.size(0), dim = x.size(1), hidden = w1.size(0);
    TORCH_CHECK(w1.size(1) == dim && w2.size(0) == dim && w2.size(1) == hidden, "mlp_block_forward: weight shapes");
    cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();
    cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
    auto xn = torch::empty_like(x);
    auto h = torch::empty({tokens, hidden}, x.options());
    auto y = torch::empty_like(x);
    check(mlp_layernorm(xn.data_ptr<float>(), x.data_ptr<float>(), ln_w.data_ptr<float>(), ln_b.data_ptr<float>(),
                        tokens, dim, static_cast<float>(eps), s), "layernorm");
    TORCH_CHECK(gemm_xwt(handle, s, (int)tokens, (int)hidden, (int)dim, xn.data_ptr<float>(), w1.data_ptr<float>(),
                         h.data_ptr<float>()) == CUBLAS_STATUS_SUCCESS, "first GEMM failed");
    check(mlp_bias_gelu(h.data_ptr<float>(), b1.data_ptr<float>(), tokens, hidden, s), "bias_gelu");
    TORCH_CHECK(gemm_xwt(handle, s, (int)tokens, (int)dim, (int)hidden, h.data_ptr<float>(), w2.data_ptr<float>(),
                         y.data_ptr<float>()) == CUBLAS_STATUS_SUCCESS, "second GEMM failed");
    check(mlp_bias_residual(y.data_ptr<float>(), b2.data_ptr<float>(), x.data_ptr<float>(), tokens, dim, s),
          "bias_residual");
    return y;
}

static void register_mlp_block(pybind11::module& m) { m.def("mlp_block_forward", &mlp_block_forward); }

REGISTER_BINDING(mlp_block, register_mlp_block);
