"""Known-good CUDA kernels for the module spots of a GPT-2-class model, as a scripted policy writes them: Linear and
transformers' Conv1D (cuBLAS GEMM and a bias kernel), LayerNorm (one block per row), GELU (erf and tanh forms).
The ModelNew of each spot keeps the task's state_dict layout (`op.weight`, `op.bias`) without importing anything
but torch: a Conv1D's parameters are declared by hand, as a model would have to (model_new.py may not import
transformers)."""

from __future__ import annotations

import re

KERNELS_CU = r"""// Spot kernels: a bias added to a GEMM's rows, LayerNorm over the last dimension, GELU (erf or tanh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

__global__ void add_bias(float* __restrict__ y, const float* __restrict__ b, int64_t n, int64_t cols) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += b[i % cols];
}

extern "C" cudaError_t add_bias_launch(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t s) {
    const int64_t n = rows * cols;
    const int64_t blocks = std::min<int64_t>((n + 255) / 256, 132 * 16);
    if (n > 0) add_bias<<<blocks, 256, 0, s>>>(y, b, n, cols);
    return cudaGetLastError();
}

__global__ void gelu(float* __restrict__ y, const float* __restrict__ x, int64_t n, int tanh_form) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        y[i] = tanh_form ? 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))
                         : 0.5f * v * (1.f + erff(v * 0.7071067811865476f));
    }
}

extern "C" cudaError_t gelu_launch(float* y, const float* x, int64_t n, int tanh_form, cudaStream_t s) {
    const int64_t blocks = std::min<int64_t>((n + 255) / 256, 132 * 16);
    if (n > 0) gelu<<<blocks, 256, 0, s>>>(y, x, n, tanh_form);
    return cudaGetLastError();
}

__device__ float block_sum(float v, float* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) shared[threadIdx.x] += shared[threadIdx.x + o];
        __syncthreads();
    }
    const float total = shared[0];
    __syncthreads();
    return total;
}

__global__ void layernorm_rows(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ b, int64_t d, float eps) {
    __shared__ float shared[256];
    const float* xr = x + blockIdx.x * d;
    float* yr = y + blockIdx.x * d;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
    const float mean = block_sum(s, shared) / d;
    float v = 0.f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) v += (xr[i] - mean) * (xr[i] - mean);
    const float inv = rsqrtf(block_sum(v, shared) / d + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

extern "C" cudaError_t layernorm_launch(float* y, const float* x, const float* w, const float* b, int64_t rows,
                                        int64_t d, float eps, cudaStream_t s) {
    if (rows > 0) layernorm_rows<<<rows, 256, 0, s>>>(y, x, w, b, d, eps);
    return cudaGetLastError();
}
"""

GEMM_CPP = r"""// cuBLAS GEMMs, row-major: Linear's Y[M,N] = X[M,K] W[N,K]^T, Conv1D's Y[M,N] = X[M,K] W[K,N].
#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" cublasStatus_t gemm_rows(cublasHandle_t handle, cudaStream_t stream, int m, int n, int k, const float* x,
                                    const float* w, float* y, int w_transposed) {
    cublasStatus_t status = cublasSetStream(handle, stream);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    const float alpha = 1.f, beta = 0.f;
    // column-major: Y^T[N,M] = op(W)[N,K] X^T[K,M]
    if (w_transposed)  // W[N,K] row-major is a K x N column-major matrix: transpose it
        return cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, k, x, k, &beta, y, n);
    return cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, w, n, x, k, &beta, y, n);
}
"""

BINDING_CPP = r"""#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cublasStatus_t gemm_rows(cublasHandle_t handle, cudaStream_t stream, int m, int n, int k, const float* x,
                                    const float* w, float* y, int w_transposed);
extern "C" cudaError_t add_bias_launch(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t s);
extern "C" cudaError_t gelu_launch(float* y, const float* x, int64_t n, int tanh_form, cudaStream_t s);
extern "C" cudaError_t layernorm_launch(float* y, const float* x, const float* w, const float* b, int64_t rows,
                                        int64_t d, float eps, cudaStream_t s);

static void expect(const torch::Tensor& x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "expected a contiguous float32 CUDA tensor");
}

// w_transposed: Linear (W[N,K]); otherwise Conv1D (W[K,N])
static torch::Tensor gemm_bias(torch::Tensor x, torch::Tensor w, torch::Tensor b, bool w_transposed) {
    expect(x);
    expect(w);
    expect(b);
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t k = x.size(-1), m = x.numel() / k, n = w_transposed ? w.size(0) : w.size(1);
    TORCH_CHECK((w_transposed ? w.size(1) : w.size(0)) == k && b.numel() == n, "weight and bias do not match");
    auto sizes = x.sizes().vec();
    sizes.back() = n;
    auto y = torch::empty(sizes, x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    const cublasStatus_t st = gemm_rows(at::cuda::getCurrentCUDABlasHandle(), stream, (int)m, (int)n, (int)k,
                                        x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), w_transposed);
    TORCH_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLAS GEMM failed with status ", (int)st);
    const cudaError_t err = add_bias_launch(y.data_ptr<float>(), b.data_ptr<float>(), m, n, stream);
    TORCH_CHECK(err == cudaSuccess, "bias kernel: ", cudaGetErrorString(err));
    return y;
}

static torch::Tensor linear_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    return gemm_bias(x, w, b, true);
}

static torch::Tensor conv1d_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    return gemm_bias(x, w, b, false);
}

static torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    expect(x);
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t d = x.size(-1);
    auto y = torch::empty_like(x);
    const cudaError_t err = layernorm_launch(y.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(),
                                             b.data_ptr<float>(), x.numel() / d, d, (float)eps,
                                             c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "layernorm kernel: ", cudaGetErrorString(err));
    return y;
}

static torch::Tensor gelu_forward(torch::Tensor x, bool tanh_form) {
    expect(x);
    const c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty_like(x);
    const cudaError_t err = gelu_launch(y.data_ptr<float>(), x.data_ptr<float>(), x.numel(), tanh_form,
                                        c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "gelu kernel: ", cudaGetErrorString(err));
    return y;
}

static void register_spot(pybind11::module& m) {
    m.def("linear_forward", &linear_forward);
    m.def("conv1d_forward", &conv1d_forward);
    m.def("layernorm_forward", &layernorm_forward);
    m.def("gelu_forward", &gelu_forward);
}

REGISTER_BINDING(spot, register_spot);
"""

MODEL_NEW = """import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, x0):
        return cuda_extension.{call}
"""


def model_new(call: str) -> str | None:
    """ModelNew for the task whose module is built by `call` (the task's `self.op = ...`); None: no kernel here."""
    kind = call.split("(")[0].removeprefix("nn.")
    numbers = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)\b", call)}
    if kind == "Linear":
        init, forward = f"        self.op = {call}", "linear_forward(x0.contiguous(), self.op.weight, self.op.bias)"
    elif kind == "Conv1D":  # transformers' layout, parameters declared by hand: model_new.py imports torch only
        nf, nx = numbers["nf"], numbers["nx"]
        init = (
            "        self.op = nn.Module()\n"
            f"        self.op.weight = nn.Parameter(torch.empty({nx}, {nf}))\n"
            f"        self.op.bias = nn.Parameter(torch.zeros({nf}))"
        )
        forward = "conv1d_forward(x0.contiguous(), self.op.weight, self.op.bias)"
    elif kind == "LayerNorm":
        init = f"        self.op = {call}"
        forward = "layernorm_forward(x0.contiguous(), self.op.weight, self.op.bias, self.op.eps)"
    elif kind in ("GELU", "NewGELUActivation", "GELUActivation", "GELUTanh"):
        tanh = kind == "NewGELUActivation" or "tanh" in call or kind == "GELUTanh"
        init, forward = "        self.op = nn.Module()", f"gelu_forward(x0.contiguous(), {tanh})"
    else:
        return None
    return MODEL_NEW.format(init=init, call=forward)


def solve(step: int, messages: list[dict]):
    """The scripted policy of the GPU test: the kernels, a ModelNew for the task's module, compile, verify,
    profile, finish."""
    task = next(m["content"] for m in messages if m["role"] == "user")
    found = re.search(r"self\.op = (.+?)(?:\.to\(torch\.\w+\))?\n", task)
    source = model_new(found.group(1)) if found else None
    if source is None:
        return {"tool": "finish", "arguments": {"summary": "no kernel for this module"}}
    steps = [
        {"tool": "write_file", "arguments": {"path": "kernels/spot.cu", "content": KERNELS_CU}},
        {"tool": "write_file", "arguments": {"path": "kernels/gemm.cpp", "content": GEMM_CPP}},
        {"tool": "write_file", "arguments": {"path": "kernels/spot_binding.cpp", "content": BINDING_CPP}},
        {"tool": "write_file", "arguments": {"path": "model_new.py", "content": source}},
        {"tool": "compile", "arguments": {}},
        {"tool": "verify", "arguments": {}},
        {"tool": "profile", "arguments": {}},
        {"tool": "finish", "arguments": {"summary": "cuBLAS GEMM with a bias kernel / row LayerNorm / GELU"}},
    ]
    return steps[min(step, len(steps) - 1)]
