"""Known-good bf16 CUDA kernels for fusion regions of transformer models, as a scripted policy writes them for a
region task (the task's forward: the region's aten calls; its weights file: the parameters' names and shapes):

- a GEMM with GPT-2's bias + tanh-GELU epilogue (transformers' Conv1D, W[K,N]): one cuBLASLt matmul with the
  GELU_BIAS epilogue, so the GEMM's output is never written out before its bias and GELU;
- a gated MLP's gate and up projections with SwiGLU's product (`silu(x @ Wg^T) * (x @ Wu^T)`): both GEMMs by
  cuBLASLt, then one kernel for the SiLU and the product (what inductor makes of it too: the floor, not a win).

Each bound as a C++ operator (TORCH_LIBRARY, CUDA and Meta implementations) in the namespace the task names, which
ModelNew calls: the put-back traces it into the model's graph. Any other region: the policy finishes without a
kernel. model_new.py imports torch only.
"""

from __future__ import annotations

import re

LT_CPP = r"""// cuBLASLt GEMMs over row-major bf16 matrices: Y[M,N] = X[M,K] * W (+ epilogue), fp32 accumulation. The
// descriptors and the algorithm of each shape are made once (a heuristic query costs tens of microseconds of host
// time: more than the GEMM saves when the model runs compiled and the host sets the pace).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>

namespace {

struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo = {};
};

// a plan per shape: what cuBLASLt was told and chose, never a result (outputs are computed by every call)
struct Shape {
    cublasLtHandle_t lt;
    int m, n, k, w_nk, epilogue;
    bool operator==(const Shape& o) const {
        return lt == o.lt && m == o.m && n == o.n && k == o.k && w_nk == o.w_nk && epilogue == o.epilogue;
    }
};

constexpr int PLANS = 16;

cublasStatus_t make_plan(cublasLtHandle_t lt, int m, int n, int k, int w_nk, int epilogue, size_t ws_size, Plan& p) {
    // column-major view: Y^T[N,M] = op(W)[N,K] * X^T[K,M]
    cublasStatus_t st = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t ta = w_nk ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    if (st == CUBLAS_STATUS_SUCCESS && epilogue == 1) {
        const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_GELU_BIAS;
        const cudaDataType_t bias_type = CUDA_R_16BF;
        st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof(bias_type));
    }
    if (st == CUBLAS_STATUS_SUCCESS)
        st = w_nk ? cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, n, k)
                  : cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, n, k, n);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, m, k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, n, m, n);
    cublasLtMatmulPreference_t pref = nullptr;
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size,
                                                  sizeof(ws_size));
    cublasLtMatmulHeuristicResult_t found = {};
    int count = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &found, &count);
    if (st == CUBLAS_STATUS_SUCCESS && count == 0) st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    p.algo = found.algo;
    return st;
}

}  // namespace

// w_nk: W is [N,K] (nn.Linear) else [K,N] (Conv1D). epilogue: 0 none, 1 bias + GELU (tanh form).
extern "C" cublasStatus_t lt_gemm_bf16(cublasLtHandle_t lt, cudaStream_t stream, int m, int n, int k, const void* x,
                                       const void* w, int w_nk, const void* bias, int epilogue, void* y, void* ws,
                                       size_t ws_size) {
    static std::mutex lock;
    static Shape shapes[PLANS];
    static Plan plans[PLANS];
    static int planned = 0;
    Plan plan;
    {
        const std::lock_guard<std::mutex> hold(lock);
        const Shape shape{lt, m, n, k, w_nk, epilogue};
        int i = 0;
        while (i < planned && !(shapes[i] == shape)) ++i;
        if (i == planned) {
            Plan made;
            const cublasStatus_t st = make_plan(lt, m, n, k, w_nk, epilogue, ws_size, made);
            if (st != CUBLAS_STATUS_SUCCESS) return st;
            if (planned == PLANS) return CUBLAS_STATUS_NOT_SUPPORTED;  // more shapes than a model of this kind has
            shapes[i] = shape;
            plans[i] = made;
            ++planned;
        }
        plan = plans[i];
        if (epilogue == 1) {  // the bias of this call (one descriptor per shape: set under the lock, used at once)
            const cublasStatus_t st =
                cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
            if (st != CUBLAS_STATUS_SUCCESS) return st;
        }
        const float alpha = 1.f, beta = 0.f;
        return cublasLtMatmul(lt, plan.op, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y, plan.c, &plan.algo, ws,
                              ws_size, stream);
    }
}
"""

SWIGLU_CU = r"""// SwiGLU's product: out[i] = silu(gate[i]) * up[i], bf16 in and out, fp32 math.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

__global__ void silu_mul(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ gate,
                         const __nv_bfloat16* __restrict__ up, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = __bfloat162float(gate[i]);
        // as the model computes it: silu rounded to bf16, then the product
        const float s = __bfloat162float(__float2bfloat16(g / (1.f + __expf(-g))));
        out[i] = __float2bfloat16(s * __bfloat162float(up[i]));
    }
}

extern "C" cudaError_t silu_mul_launch(void* out, const void* gate, const void* up, int64_t total, cudaStream_t s) {
    const int64_t blocks = std::min<int64_t>((total + 255) / 256, 132 * 32);
    if (total > 0)
        silu_mul<<<blocks, 256, 0, s>>>((__nv_bfloat16*)out, (const __nv_bfloat16*)gate,
                                        (const __nv_bfloat16*)up, total);
    return cudaGetLastError();
}
"""

BINDING_CPP = r"""#include <torch/types.h>
#include <torch/library.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>
#include <cuda_runtime.h>

extern "C" cublasStatus_t lt_gemm_bf16(cublasLtHandle_t lt, cudaStream_t stream, int m, int n, int k, const void* x,
                                       const void* w, int w_nk, const void* bias, int epilogue, void* y, void* ws,
                                       size_t ws_size);
extern "C" cudaError_t silu_mul_launch(void* out, const void* gate, const void* up, int64_t total, cudaStream_t s);

static constexpr size_t WORKSPACE = 32u << 20;

static void expect(const torch::Tensor& t) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kBFloat16,
                "expected a contiguous bfloat16 CUDA tensor");
}

static void gemm(const torch::Tensor& x, const torch::Tensor& w, bool w_nk, const torch::Tensor* bias, int epilogue,
                 torch::Tensor& y, int64_t m, int64_t n, int64_t k) {
    // one workspace, made on first use and kept (never freed: no destructor runs after CUDA is torn down)
    static torch::Tensor* ws = nullptr;
    if (ws == nullptr || ws->device() != x.device())
        ws = new torch::Tensor(torch::empty({(int64_t)WORKSPACE}, x.options().dtype(torch::kUInt8)));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    const cublasStatus_t st =
        lt_gemm_bf16(at::cuda::getCurrentCUDABlasLtHandle(), stream, (int)m, (int)n, (int)k, x.data_ptr(),
                     w.data_ptr(), w_nk, bias ? bias->data_ptr() : nullptr, epilogue, y.data_ptr(), ws->data_ptr(),
                     WORKSPACE);
    TORCH_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt matmul failed with status ", (int)st);
}

static std::vector<int64_t> with_last(const torch::Tensor& x, int64_t n) {
    auto sizes = x.sizes().vec();
    sizes.back() = n;
    return sizes;
}

// GPT-2's MLP up-projection: Conv1D (W[K,N]) + bias + tanh GELU, one cuBLASLt call
static torch::Tensor conv1d_gelu(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    expect(x), expect(w), expect(b);
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t k = x.size(-1), m = x.numel() / k, n = w.size(1);
    TORCH_CHECK(w.size(0) == k && b.numel() == n, "weight and bias do not match");
    auto y = torch::empty(with_last(x, n), x.options());
    gemm(x, w, false, &b, 1, y, m, n, k);
    return y;
}

// a gated MLP's silu(x Wg^T) * (x Wu^T): the two GEMMs, then one kernel for the SiLU and the product
static torch::Tensor swiglu(const torch::Tensor& x, const torch::Tensor& wg, const torch::Tensor& wu) {
    expect(x), expect(wg), expect(wu);
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t k = x.size(-1), m = x.numel() / k, n = wg.size(0);
    TORCH_CHECK(wg.size(1) == k && wu.size(0) == n && wu.size(1) == k, "weights do not match");
    auto gate = torch::empty({m, n}, x.options()), up = torch::empty({m, n}, x.options());
    gemm(x, wg, true, nullptr, 0, gate, m, n, k);
    gemm(x, wu, true, nullptr, 0, up, m, n, k);
    auto out = torch::empty(with_last(x, n), x.options());
    const cudaError_t err = silu_mul_launch(out.data_ptr(), gate.data_ptr(), up.data_ptr(), m * n,
                                            c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "silu_mul kernel: ", cudaGetErrorString(err));
    return out;
}

// shapes alone, for tracing (torch.compile, the put-back)
static torch::Tensor conv1d_gelu_meta(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    return torch::empty(with_last(x, w.size(1)), x.options());
}

static torch::Tensor swiglu_meta(const torch::Tensor& x, const torch::Tensor& wg, const torch::Tensor& wu) {
    return torch::empty(with_last(x, wg.size(0)), x.options());
}

TORCH_LIBRARY(NAMESPACE, m) {
    m.def("conv1d_gelu(Tensor x, Tensor w, Tensor b) -> Tensor");
    m.def("swiglu(Tensor x, Tensor wg, Tensor wu) -> Tensor");
}

TORCH_LIBRARY_IMPL(NAMESPACE, CUDA, m) {
    m.impl("conv1d_gelu", &conv1d_gelu);
    m.impl("swiglu", &swiglu);
}

TORCH_LIBRARY_IMPL(NAMESPACE, Meta, m) {
    m.impl("conv1d_gelu", &conv1d_gelu_meta);
    m.impl("swiglu", &swiglu_meta);
}
"""

MODEL_NEW = """import torch
import torch.nn as nn

import cuda_extension  # noqa: F401  (loading it registers the operators)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
{params}

    def forward(self, x):
        return torch.ops.{namespace}.{call}
"""


def model_new(task: str) -> str | None:
    """ModelNew for a region task (its text), or None where no kernel here serves the region."""
    import torch

    calls = re.findall(r"torch\.ops\.aten\.(\w+)\.\w+\(", task)
    views = re.findall(r"torch\.ops\.aten\.view\.default\(\w+, (\[[-0-9, ]+\])\)", task)
    weights = re.search(r"WEIGHTS = '([^']+)'", task)
    if weights is None:
        return None
    state = torch.load(weights.group(1), weights_only=True)
    params = "\n".join(
        f"        self.{k} = nn.Parameter(torch.empty({tuple(v.shape)}, dtype=torch.bfloat16), requires_grad=False)"
        for k, v in state.items()
    )
    if any(v.dtype != torch.bfloat16 for v in state.values()):
        return None
    if "addmm" in calls and "tanh" in calls and len(state) == 2:  # GPT-2's Conv1D + bias + tanh GELU
        w = next(k for k, v in state.items() if v.dim() == 2)
        b = next(k for k, v in state.items() if v.dim() == 1)
        call = f"conv1d_gelu(x.contiguous(), self.{w}, self.{b})"
    elif calls.count("linear") == 2 and "silu" in calls and "mul" in calls and len(state) == 2:  # SwiGLU
        gate = next(k for k in state if "gate" in k)
        up = next(k for k in state if "up" in k)
        call = f"swiglu(x.contiguous(), self.{gate}, self.{up})"
    else:
        return None
    if calls[-1] == "view":  # the region ends in a view of its result: the kernel's output, viewed alike
        call += f".view({views[-1]})"
    return MODEL_NEW.format(params=params, call=call, namespace=namespace(task))


def namespace(task: str) -> str:
    """The operator namespace the region task names for its kernel."""
    return re.search(r"TORCH_LIBRARY\((\w+), m\)", task).group(1)


def solve(step: int, messages: list[dict]):
    """The scripted policy of the GPU region test: the kernels, a ModelNew for the region, compile, verify,
    profile, finish."""
    task = next(m["content"] for m in messages if m["role"] == "user")
    source = model_new(task)
    if source is None:
        return {"tool": "finish", "arguments": {"summary": "no kernel for this region"}}
    steps = [
        {"tool": "write_file", "arguments": {"path": "kernels/region_lt.cpp", "content": LT_CPP}},
        {"tool": "write_file", "arguments": {"path": "kernels/region.cu", "content": SWIGLU_CU}},
        {
            "tool": "write_file",
            "arguments": {
                "path": "kernels/region_binding.cpp",
                "content": BINDING_CPP.replace("NAMESPACE", namespace(task)),
            },
        },
        {"tool": "write_file", "arguments": {"path": "model_new.py", "content": source}},
        {"tool": "compile", "arguments": {}},
        {"tool": "verify", "arguments": {}},
        {"tool": "profile", "arguments": {}},
        {"tool": "finish", "arguments": {"summary": "cuBLASLt GEMM with a GELU epilogue / SwiGLU"}},
    ]
    return steps[min(step, len(steps) - 1)]
