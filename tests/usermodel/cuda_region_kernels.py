"""Known-good CUDA kernels for fusion regions of transformer models and ResNets, as a scripted policy writes them for a
region task (the task's forward: the region's aten calls; its weights file: the parameters' names and shapes):

- a GEMM with GPT-2's bias + tanh-GELU epilogue (transformers' Conv1D, W[K,N]): one cuBLASLt matmul with the
  GELU_BIAS epilogue, so the GEMM's output is never written out before its bias and GELU;
- a gated MLP's gate and up projections with SwiGLU's product (`silu(x @ Wg^T) * (x @ Wu^T)`): both GEMMs by
  cuBLASLt, then one kernel for the SiLU and the product (what inductor makes of it too: the floor, not a win);
- attention whose mask the task builds from shapes alone (a traced transformers model's causal mask, folded into
  the region): a causal kernel of its own on Hopper's warpgroup MMAs (the softmax online in registers, the key
  blocks above the diagonal never read), writing the transpose and reshape that follow; for Llama's region, which
  starts at the q, k and v projections' outputs, with the rotary embedding (k in a pass of its own, q as it loads)
  and GQA's repeat (by indexing) too;
- Llama's RMSNorm with the residual add before it (one pass a row: the sum written, the norm from it), rounded where
  the model rounds (what inductor fuses too: kept only if the proof finds it faster);
- a convolution region of a ResNet in fp32 (conv2d, its batch norm in eval mode, a residual add, a ReLU, or two such
  convolutions joined by the add): each convolution one cuDNN call with the batch norm folded into its weights and
  bias by a kernel of its own, the residual and the ReLU fused into the call (cudnnConvolutionBiasActivationForward).

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

# Eight rotary pairs from 16-byte chunks: x1 the first half's values, x2 the second's (columns i and i + D/2), with
# their cos and sin; each product rounded to bf16 by the packed multiply (a product of two bf16 values is exact in
# fp32, so one rounding, as the model's fp32 multiply and cast), the sum in fp32 and rounded. Named per source
# (torch's load_inline joins the sources into one unit).
_ROTATE_EIGHT = r"""__device__ __forceinline__ void NAME(const uint4& x1, const uint4& x2, const uint4& c1,
                                     const uint4& c2, const uint4& s1, const uint4& s2, uint4& lo, uint4& hi) {
    using bf162 = __nv_bfloat162;
    const bf162 *a = reinterpret_cast<const bf162*>(&x1), *b = reinterpret_cast<const bf162*>(&x2);
    const bf162 *ca = reinterpret_cast<const bf162*>(&c1), *cb = reinterpret_cast<const bf162*>(&c2);
    const bf162 *sa = reinterpret_cast<const bf162*>(&s1), *sb = reinterpret_cast<const bf162*>(&s2);
    bf162 *ol = reinterpret_cast<bf162*>(&lo), *oh = reinterpret_cast<bf162*>(&hi);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float2 xc = __bfloat1622float2(__hmul2(a[e], ca[e])), ys = __bfloat1622float2(__hmul2(b[e], sa[e]));
        const float2 yc = __bfloat1622float2(__hmul2(b[e], cb[e])), xs = __bfloat1622float2(__hmul2(a[e], sb[e]));
        ol[e] = __floats2bfloat162_rn(xc.x - ys.x, xc.y - ys.y);
        oh[e] = __floats2bfloat162_rn(yc.x + xs.x, yc.y + xs.y);
    }
}
"""

NORM_ROTARY_CU = r"""// RMSNorm with its residual add, and the rotary projection, bf16 in and out, rounded as the model
// rounds.
//
// add_rmsnorm: sum = bf16(x + r) (written: the residual stream goes on), out = bf16(w * bf16(sum * rstd)),
// rstd = rsqrt(mean(sum^2) + eps) in fp32; r null: the norm of x alone. One block a row, 16-byte loads.
// rotary: on y [B, T, H, D] (the projection's output), in place, or each head written `repeats` times as
// [B, H, repeats, T, D] (GQA's repeat of k for attention), for i < D/2:
// y[i] <- bf16(bf16(y[i] cos[i]) + bf16(-y[i+D/2] sin[i])),
// y[i+D/2] <- bf16(bf16(y[i+D/2] cos[i+D/2]) + bf16(y[i] sin[i+D/2]))
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float rounded(float v) { return __bfloat162float(__float2bfloat16(v)); }

template <int THREADS>
__device__ float block_sum(float v) {
    __shared__ float partial[THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < THREADS / 32; ++i) total += partial[i];
    return total;
}

template <int THREADS>
__global__ void add_rmsnorm_kernel(const bf16* __restrict__ x, const bf16* __restrict__ r, const bf16* __restrict__ w,
                                   bf16* __restrict__ sum, bf16* __restrict__ out, int64_t cols, float eps,
                                   bool vec) {
    const int64_t base = blockIdx.x * cols;
    float sq = 0.f;
    if (vec) {  // eight values a load
        for (int64_t c = threadIdx.x * 8; c < cols; c += THREADS * 8) {
            uint4 xv = *reinterpret_cast<const uint4*>(x + base + c);
            bf16* xs = reinterpret_cast<bf16*>(&xv);
            if (r != nullptr) {
                const uint4 rv = *reinterpret_cast<const uint4*>(r + base + c);
                const bf16* rs = reinterpret_cast<const bf16*>(&rv);
#pragma unroll
                for (int j = 0; j < 8; ++j) xs[j] = __float2bfloat16(__bfloat162float(xs[j]) + __bfloat162float(rs[j]));
                *reinterpret_cast<uint4*>(sum + base + c) = xv;
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) sq += __bfloat162float(xs[j]) * __bfloat162float(xs[j]);
        }
    } else {
        for (int64_t c = threadIdx.x; c < cols; c += THREADS) {
            float v = __bfloat162float(x[base + c]);
            if (r != nullptr) {
                v = rounded(v + __bfloat162float(r[base + c]));
                sum[base + c] = __float2bfloat16(v);
            }
            sq += v * v;
        }
    }
    const float rstd = rsqrtf(block_sum<THREADS>(sq) / (float)cols + eps);
    const bf16* src = r != nullptr ? sum : x;  // each thread reads back only what it wrote itself
    if (vec) {
        for (int64_t c = threadIdx.x * 8; c < cols; c += THREADS * 8) {
            const uint4 sv = *reinterpret_cast<const uint4*>(src + base + c);
            const uint4 wv = *reinterpret_cast<const uint4*>(w + c);
            const bf16* ss = reinterpret_cast<const bf16*>(&sv);
            const bf16* ws = reinterpret_cast<const bf16*>(&wv);
            uint4 ov;
            bf16* os = reinterpret_cast<bf16*>(&ov);
#pragma unroll
            for (int j = 0; j < 8; ++j)
                os[j] = __float2bfloat16(__bfloat162float(ws[j]) * rounded(__bfloat162float(ss[j]) * rstd));
            *reinterpret_cast<uint4*>(out + base + c) = ov;
        }
    } else {
        for (int64_t c = threadIdx.x; c < cols; c += THREADS)
            out[base + c] =
                __float2bfloat16(__bfloat162float(w[c]) * rounded(__bfloat162float(src[base + c]) * rstd));
    }
}

extern "C" cudaError_t add_rmsnorm_launch(const void* x, const void* r, const void* w, void* sum, void* out,
                                          int64_t rows, int64_t cols, float eps, cudaStream_t s) {
    // 16-byte loads where every row starts 16-byte aligned
    bool vec = cols % 8 == 0;
    for (const void* p : {x, r, w, (const void*)sum, (const void*)out}) vec = vec && (uintptr_t)p % 16 == 0;
    if (rows > 0)
        add_rmsnorm_kernel<256><<<(unsigned)rows, 256, 0, s>>>((const bf16*)x, (const bf16*)r, (const bf16*)w,
                                                               (bf16*)sum, (bf16*)out, cols, eps, vec);
    return cudaGetLastError();
}

__global__ void rotary_kernel(const bf16* __restrict__ src, bf16* __restrict__ dst, const bf16* __restrict__ cos,
                              const bf16* __restrict__ sin, int64_t rows, int64_t tokens, int64_t heads, int64_t dim,
                              int64_t batch_stride, int64_t token_stride, int repeats) {
    const int64_t row = blockIdx.x * (int64_t)blockDim.y + threadIdx.y;  // one (b, t, h) a row of D values
    if (row >= rows) return;
    const int64_t h = row % heads, t = (row / heads) % tokens, b = row / (heads * tokens);
    const bf16* q = src + row * dim;
    const bf16* c = cos + b * batch_stride + t * token_stride;
    const bf16* sn = sin + b * batch_stride + t * token_stride;
    const int64_t half = dim / 2;
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
        const float q1 = __bfloat162float(q[i]), q2 = __bfloat162float(q[i + half]);
        const bf16 first =
            __float2bfloat16(rounded(q1 * __bfloat162float(c[i])) + rounded(-q2 * __bfloat162float(sn[i])));
        const bf16 second = __float2bfloat16(rounded(q2 * __bfloat162float(c[i + half])) +
                                             rounded(q1 * __bfloat162float(sn[i + half])));
        if (repeats == 0) {  // in place: [B, T, H, D]
            bf16* out = dst + row * dim;
            out[i] = first;
            out[i + half] = second;
        } else {  // each head `repeats` times, heads first: [B, H, repeats, T, D]
            for (int r = 0; r < repeats; ++r) {
                bf16* out = dst + (((b * heads + h) * repeats + r) * tokens + t) * dim;
                out[i] = first;
                out[i + half] = second;
            }
        }
    }
}

// the same, 8 pairs a thread by 16-byte loads and stores (D / 16 threads a row): where every row and table row is
// 16-byte aligned
ROTATE_EIGHT
__global__ void rotary_kernel_vec(const bf16* __restrict__ src, bf16* __restrict__ dst, const bf16* __restrict__ cos,
                                  const bf16* __restrict__ sin, int64_t rows, int64_t tokens, int64_t heads,
                                  int64_t dim, int64_t batch_stride, int64_t token_stride, int repeats) {
    const int64_t per_row = dim / 16, idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, row = idx / per_row;
    if (row >= rows) return;
    const int64_t i = (idx % per_row) * 8, half = dim / 2;
    const int64_t h = row % heads, t = (row / heads) % tokens, b = row / (heads * tokens);
    const bf16* q = src + row * dim;
    const bf16* c = cos + b * batch_stride + t * token_stride;
    const bf16* sn = sin + b * batch_stride + t * token_stride;
    const uint4 x1 = *reinterpret_cast<const uint4*>(q + i), x2 = *reinterpret_cast<const uint4*>(q + i + half);
    const uint4 c1 = *reinterpret_cast<const uint4*>(c + i), c2 = *reinterpret_cast<const uint4*>(c + i + half);
    const uint4 s1 = *reinterpret_cast<const uint4*>(sn + i), s2 = *reinterpret_cast<const uint4*>(sn + i + half);
    uint4 lo, hi;
    rotate_eight(x1, x2, c1, c2, s1, s2, lo, hi);
    for (int r = 0; r < (repeats == 0 ? 1 : repeats); ++r) {
        bf16* out = repeats == 0 ? dst + row * dim : dst + (((b * heads + h) * repeats + r) * tokens + t) * dim;
        *reinterpret_cast<uint4*>(out + i) = lo;
        *reinterpret_cast<uint4*>(out + i + half) = hi;
    }
}

extern "C" cudaError_t rotary_launch(const void* src, void* dst, const void* cos, const void* sin, int64_t batch,
                                     int64_t tokens, int64_t heads, int64_t dim, int64_t batch_stride,
                                     int64_t token_stride, int repeats, cudaStream_t s) {
    const int64_t rows = batch * tokens * heads;
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (rows > 0 && dim % 16 == 0 && batch_stride % 8 == 0 && token_stride % 8 == 0 && aligned(src) && aligned(dst) &&
        aligned(cos) && aligned(sin)) {
        const int64_t threads = rows * (dim / 16);
        rotary_kernel_vec<<<(unsigned)((threads + 255) / 256), 256, 0, s>>>(
            (const bf16*)src, (bf16*)dst, (const bf16*)cos, (const bf16*)sin, rows, tokens, heads, dim, batch_stride,
            token_stride, repeats);
        return cudaGetLastError();
    }
    const dim3 block(32, 8);
    if (rows > 0)
        rotary_kernel<<<(unsigned)((rows + 7) / 8), block, 0, s>>>((const bf16*)src, (bf16*)dst, (const bf16*)cos,
                                                                   (const bf16*)sin, rows, tokens, heads, dim,
                                                                   batch_stride, token_stride, repeats);
    return cudaGetLastError();
}
""".replace("ROTATE_EIGHT", _ROTATE_EIGHT.replace("NAME", "rotate_eight"))

ATTENTION_TEMPLATE = r"""// Causal attention on Hopper's warpgroup tensor cores (wgmma), bf16 in and out, fp32 softmax
// and accumulation.
//
// A block takes 128 query rows of one (batch, head), two warpgroups of 64 rows each; it walks the key blocks up to
// the diagonal only (the mask is causal: the blocks above it are never read), S = Q K^T with Q and K from shared
// memory, the softmax online in registers, then O += P V with P from registers and V from shared memory: both
// products as warpgroup MMAs (m64nNk16) issued by each warpgroup for its rows. K and V load (cp.async) two key
// blocks ahead while this block's products run, and each step's softmax runs while the step before's P V does;
// tiles are stored as the tensor cores read them (rows of 64 values, 128-byte swizzle). GQA: a query head reads
// key/value head h / group. q may get the rotary embedding as it loads (y = x cos + rotate_half(x) sin, rounded to
// bf16 at each step as the model rounds), its loads issued while K and V's first blocks load; O leaves through shared
// memory, whole rows at a time.
// q, k, v: [B, H, T, D] by strides (the last dimension contiguous); out: [B, T, H, D] contiguous.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

using bf16 = __nv_bfloat16;
constexpr int BM = 128, THREADS = 256;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// byte offset of element (row, col) in a tile of `rows` rows stored as the tensor cores read it: the columns in
// groups of 64 (one 128-byte row each), each group's rows one after another, 16-byte chunks swizzled by row % 8
__device__ __forceinline__ uint32_t tile_offset(int rows, int row, int col) {
    return (uint32_t)(((col >> 6) * rows + row) * 128 + ((((col >> 3) & 7) ^ (row & 7)) << 4) + (col & 7) * 2);
}

// a shared-memory matrix descriptor: 128-byte swizzle, `lead` and `stride` byte offsets
__device__ __forceinline__ uint64_t descriptor(uint32_t addr, uint32_t lead, uint32_t stride) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lead & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((stride & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void cp16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ void store_shared(uint32_t dst, uint4 v) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

// buffers of K and V: the loads run STAGES - 1 key blocks ahead (three buffers of 64 keys; two of 128, as three would
// not fit in shared memory)
__host__ __device__ constexpr int stages(int block_n) { return block_n == 64 ? ATTENTION_STAGES : 2; }

// the registers a warpgroup MMA writes, held in place across it (the compiler must not move them meanwhile)
template <int N>
__device__ __forceinline__ void hold(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int N>
__device__ __forceinline__ void hold_regs(uint32_t* r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

WGMMA_WRAPPERS

template <int N>
__device__ __forceinline__ void mma_ss(float* d, uint64_t a, uint64_t b, int accumulate) {
    if constexpr (N == 64) wgmma_ss_n64(d, a, b, accumulate);
    else wgmma_ss_n128(d, a, b, accumulate);
}

template <int N>
__device__ __forceinline__ void mma_rs(float* d, const uint32_t* a, uint64_t b) {
    if constexpr (N == 64) wgmma_rs_n64(d, a, b);
    else wgmma_rs_n128(d, a, b);
}

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// rows [r0, r0 + ROWS) of a [T, D] matrix (row stride `stride`) into `tile` by cp.async; rows past `tokens` zero.
// Thread tid copies the 16-byte chunks tid + i * THREADS: one column, rows THREADS / (D / 8) apart (a multiple of
// 8, so every chunk of the thread has the same swizzle): the addresses one add each, no branch but at the last block
template <int D, int ROWS>
__device__ __forceinline__ void load_async(uint32_t tile, const bf16* base, int64_t stride, int r0, int tokens,
                                           int tid) {
    constexpr int CHUNKS = D / 8, PER = ROWS * CHUNKS / THREADS, ROW_STEP = THREADS / CHUNKS;
    static_assert(ROWS * CHUNKS % THREADS == 0 && ROW_STEP % 8 == 0, "a thread's chunks share their swizzle");
    const int row = tid / CHUNKS, col = (tid % CHUNKS) * 8;
    const uint32_t dst = tile + tile_offset(ROWS, row, col);
    const bf16* src = base + (int64_t)(r0 + row) * stride + col;
    const int64_t step = (int64_t)ROW_STEP * stride;
    if (r0 + ROWS <= tokens) {
#pragma unroll
        for (int i = 0; i < PER; ++i) cp16(dst + i * ROW_STEP * 128, src + i * step);
    } else {
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            if (r0 + row + i * ROW_STEP < tokens)
                cp16(dst + i * ROW_STEP * 128, src + i * step);
            else
                store_shared(dst + i * ROW_STEP * 128, make_uint4(0, 0, 0, 0));
        }
    }
}

ROTATE_EIGHT
// the query tile with the rotary embedding (cos, sin: [T, D] rows of this batch), by plain loads: every load of the
// thread issued before the first value is used (one memory latency for the tile), then rotated into the tile
template <int D>
__device__ __forceinline__ void load_query_rotated(uint32_t tile, const bf16* q, int64_t stride, int q0, int tokens,
                                                   const bf16* cos, const bf16* sin, int64_t table_stride, int tid) {
    constexpr int HALF = D / 2, PAIRS = HALF / 8, PER = BM * PAIRS / THREADS;
    static_assert(BM * PAIRS % THREADS == 0, "every thread rotates as many chunks");
    uint4 x1[PER], x2[PER], c1[PER], c2[PER], s1[PER], s2[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int c = tid + i * THREADS, row = c / PAIRS, col = (c % PAIRS) * 8, t = q0 + row;
        const uint4 zero = make_uint4(0, 0, 0, 0);
        x1[i] = x2[i] = c1[i] = c2[i] = s1[i] = s2[i] = zero;
        if (t < tokens) {
            const bf16 *qr = q + (int64_t)t * stride + col, *cr = cos + (int64_t)t * table_stride + col,
                       *sr = sin + (int64_t)t * table_stride + col;
            x1[i] = __ldg(reinterpret_cast<const uint4*>(qr)), x2[i] = __ldg(reinterpret_cast<const uint4*>(qr + HALF));
            c1[i] = __ldg(reinterpret_cast<const uint4*>(cr)), c2[i] = __ldg(reinterpret_cast<const uint4*>(cr + HALF));
            s1[i] = __ldg(reinterpret_cast<const uint4*>(sr)), s2[i] = __ldg(reinterpret_cast<const uint4*>(sr + HALF));
        }
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int c = tid + i * THREADS, row = c / PAIRS, col = (c % PAIRS) * 8;
        uint4 lo, hi;
        rotate_query_eight(x1[i], x2[i], c1[i], c2[i], s1[i], s2[i], lo, hi);
        store_shared(tile + tile_offset(BM, row, col), lo);
        store_shared(tile + tile_offset(BM, row, col + HALF), hi);
    }
}

// S = Q K^T for this warpgroup's 64 rows and a key block (issued, not waited for)
template <int D, int BN>
__device__ __forceinline__ void issue_scores(float (&s)[BN / 2], uint32_t q_wg, uint32_t k_tile) {
    hold<BN / 2>(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
        const uint32_t a = q_wg + (ks / 4) * (BM * 128) + (ks % 4) * 32;
        const uint32_t b = k_tile + (ks / 4) * (BN * 128) + (ks % 4) * 32;
        mma_ss<BN>(s, descriptor(a, 16, 1024), descriptor(b, 16, 1024), ks > 0);
    }
    wgmma_commit();
    hold<BN / 2>(s);
}

// O += P V for a key block (issued, not waited for); V [BN keys][D] is N-major for this product: its 64-column
// groups BN * 128 bytes apart, 8 keys 1024
template <int D, int BN>
__device__ __forceinline__ void issue_values(float (&o)[D / 2], uint32_t (&p)[BN / 16][4], uint32_t v_tile) {
    hold<D / 2>(o);  // every write of O and P done before the fence, as it orders them before the MMAs
    hold_regs<BN / 4>(&p[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) mma_rs<D>(o, p[kk], descriptor(v_tile + kk * (16 * 128), BN * 128, 1024));
    wgmma_commit();
    hold<D / 2>(o);
}

template <int BN>
__device__ __forceinline__ float masked(const float (&s)[BN / 2], int i, int k0, int row_a, int tokens, int lane,
                                        float scale_log2) {
    const int key = k0 + (i / 4) * 8 + 2 * (lane % 4) + (i & 1), row = row_a + ((i >> 1) & 1) * 8;
    return key > row || key >= tokens ? -INFINITY : s[i] * scale_log2;
}

// 2^x in one instruction (denormal results flushed to zero: a probability under 2^-126 of the row's largest)
__device__ __forceinline__ float exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// MASK: a block that reaches past the diagonal or the last key, each score checked; else the block's scores all
// count, its maximum taken on the raw scores (the scale is positive) and each exponent one fused multiply-add
template <int BN, bool MASK>
__device__ __forceinline__ void softmax_block(const float (&s)[BN / 2], uint32_t (&p)[BN / 16][4], float (&m)[2],
                                              float (&l)[2], float (&alpha)[2], int k0, int row_a, int tokens,
                                              int lane, float scale_log2) {
    float mx[2] = {m[0], m[1]};
    if constexpr (MASK) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i)
            mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], masked<BN>(s, i, k0, row_a, tokens, lane, scale_log2));
    } else {
        float raw[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) raw[(i >> 1) & 1] = fmaxf(raw[(i >> 1) & 1], s[i]);
        mx[0] = fmaxf(mx[0], raw[0] * scale_log2), mx[1] = fmaxf(mx[1], raw[1] * scale_log2);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 2));
        // a row that has seen only masked keys so far keeps m = -inf: nothing to rescale, p = 0
        const float use = mx[r] == -INFINITY ? 0.f : mx[r];
        alpha[r] = exp2_fast(m[r] - use);
        m[r] = mx[r];
        l[r] *= alpha[r];
        mx[r] = use;
    }
#pragma unroll
    for (int t = 0; t < BN / 8; ++t) {
        float e[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if constexpr (MASK) {
                e[i] = exp2_fast(masked<BN>(s, 4 * t + i, k0, row_a, tokens, lane, scale_log2) - mx[i >> 1]);
            } else {
                e[i] = exp2_fast(fmaf(s[4 * t + i], scale_log2, -mx[i >> 1]));
            }
        }
        l[0] += e[0] + e[1], l[1] += e[2] + e[3];
        p[t / 2][(t % 2) * 2] = pack(e[0], e[1]);
        p[t / 2][(t % 2) * 2 + 1] = pack(e[2], e[3]);
    }
}

// the online softmax of one key block's scores: rows row_a (s[4t], s[4t+1]) and row_a + 8 (s[4t+2], s[4t+3]); P in
// bf16 (as SDPA's own bf16 kernels round it) as the A operand of P V (the accumulator layout of two n-tiles is one
// k-step's A fragment); alpha: what O so far is scaled by. s is only read: an instruction that wrote it while the
// step's other MMA runs would serialize the MMAs
template <int BN>
__device__ __forceinline__ void softmax(const float (&s)[BN / 2], uint32_t (&p)[BN / 16][4], float (&m)[2],
                                        float (&l)[2], float (&alpha)[2], int k0, int row_a, bool edge, int tokens,
                                        int lane, float scale_log2) {
    if (edge || scale_log2 < 0.f)
        softmax_block<BN, true>(s, p, m, l, alpha, k0, row_a, tokens, lane, scale_log2);
    else
        softmax_block<BN, false>(s, p, m, l, alpha, k0, row_a, tokens, lane, scale_log2);
}

template <int D, int BN>
__global__ void __launch_bounds__(THREADS, 1) causal_attention_kernel(
    const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v, bf16* __restrict__ out,
    int heads, int group, int tokens, int64_t qb, int64_t qh, int64_t qt, int64_t kb, int64_t kh, int64_t kt,
    int64_t vb, int64_t vh, int64_t vt, const bf16* __restrict__ cos, const bf16* __restrict__ sin,
    int64_t table_b, int64_t table_t, float scale_log2) {
    extern __shared__ unsigned char smem_raw[];
    // Q [BM][D], then K and V [BN][D] in STAGES buffers each; every tile on a 1024-byte boundary (the swizzle's
    // period)
    constexpr int S_ = stages(BN);
    const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
    constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    const uint32_t q_s = base, k_s = base + Q_BYTES, v_s = base + Q_BYTES + S_ * KV_BYTES;
    const uint32_t scratch = base + Q_BYTES + 2 * S_ * KV_BYTES;  // a word every thread writes and none reads

    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int block = gridDim.x - 1 - blockIdx.x;  // the longest rows (most key blocks) first
    const int bh = blockIdx.y, b = bh / heads, h = bh % heads, kvh = h / group;
    const int q0 = block * BM;
    const bf16* qp = q + b * qb + h * qh;
    const bf16* kp = k + b * kb + kvh * kh;
    const bf16* vp = v + b * vb + kvh * vh;
    const bf16* cp = cos ? cos + b * table_b : nullptr;
    const bf16* sp = sin ? sin + b * table_b : nullptr;

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];
    float s[BN / 2];
    uint32_t p[BN / 16][4], next[BN / 16][4];  // P of the block before (the A operand of its P V), and this block's
    const int wg_first = q0 + wg * 64;
    const int row_a = wg_first + warp * 16 + lane / 4;  // this thread's two rows: row_a and row_a + 8
    const int last = (min(q0 + BM, tokens) - 1) / BN;   // the block's last key block
    const uint32_t q_wg = q_s + wg * (64 * 128);
    auto k_buf = [&](int block) { return k_s + (uint32_t)(block % S_) * KV_BYTES; };
    auto v_buf = [&](int block) { return v_s + (uint32_t)(block % S_) * KV_BYTES; };
    // group g of loads: K_g and V_{g-1} (where they exist); group 0 is Q and K_0
    auto load_group = [&](int g) {
        if (g >= 1 && g <= last) load_async<D, BN>(k_buf(g), kp, kt, g * BN, tokens, tid);
        if (g >= 1 && g - 1 <= last) load_async<D, BN>(v_buf(g - 1), vp, vt, (g - 1) * BN, tokens, tid);
        asm volatile("cp.async.commit_group;\n" ::);
    };

    if (cp == nullptr) load_async<D, BM>(q_s, qp, qt, q0, tokens, tid);
    load_async<D, BN>(k_s, kp, kt, 0, tokens, tid);
    asm volatile("cp.async.commit_group;\n" ::);

    // Every warpgroup issues its MMAs on every step, outside any branch (a warpgroup MMA on a path the compiler
    // cannot prove uniform is serialized with the ones before it): a warpgroup whose rows see no key of a block
    // multiplies it anyway and the mask zeroes it (never with 128 keys a block: the diagonal block reaches both).
    // Step j: S_j = Q K_j^T and O += P_{j-1} V_{j-1} go to the tensor cores together, the softmax of S_j runs while
    // the second does; the loads run STAGES - 1 steps ahead (group j + STAGES - 1: K_{j+STAGES-1}, V_{j+STAGES-2}),
    // into the buffers their last readers (S_{j-1}, P_{j-2} V_{j-2}) left before the barrier that ended step j - 1.
    for (int g = 1; g < S_; ++g) load_group(g);
    if (cp != nullptr) load_query_rotated<D>(q_s, qp, qt, q0, tokens, cp, sp, table_t, tid);  // while those load
    cp_async_wait<S_ - 1>();  // Q and K_0 are in
    proxy_fence();
    __syncthreads();
    issue_scores<D, BN>(s, q_wg, k_s);
    wgmma_wait<0>();
    hold<BN / 2>(s);
    softmax<BN>(s, p, m, l, alpha, 0, row_a, true, tokens, lane, scale_log2);
    cp_async_wait<S_ - 2>();  // K_1 and V_0 are in
    proxy_fence();
    __syncthreads();
    // one step; `now` holds P_{j-1}, `then` gets P_j: two register sets taken in turn (a copy from one to the other
    // would be an instruction writing a pending MMA's operand, and the compiler would serialize the MMAs)
    auto step = [&](int j, uint32_t(&now)[BN / 16][4], uint32_t(&then)[BN / 16][4]) {
        const int k0 = j * BN;
        issue_scores<D, BN>(s, q_wg, k_buf(j));
        issue_values<D, BN>(o, now, v_buf(j - 1));
        load_group(j + S_ - 1);  // after the MMAs are issued: the tensor cores start as the barrier ends
        wgmma_wait<1>();  // S_j is in (the groups complete in order); P_{j-1} V_{j-1} may still run
        hold<BN / 2>(s);
        softmax<BN>(s, then, m, l, alpha, k0, row_a, k0 + BN - 1 > wg_first || k0 + BN > tokens, tokens, lane,
                    scale_log2);
        // the row sums (which every exponential feeds) stored before the wait below, so that the assembler
        // computes the softmax there, while P V runs (it otherwise moves the exponentials past the wait and the
        // barrier after it: a store may not pass the wait, arithmetic may)
        asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(scratch), "f"(l[0] + l[1]) : "memory");
        wgmma_wait<0>();  // P_{j-1} V_{j-1} is in O
        hold<D / 2>(o);
#pragma unroll
        for (int t = 0; t < D / 8; ++t) {  // O to the new maximum
            o[4 * t] *= alpha[0], o[4 * t + 1] *= alpha[0], o[4 * t + 2] *= alpha[1], o[4 * t + 3] *= alpha[1];
        }
        cp_async_wait<S_ - 2>();  // K_{j+1} and V_j are in
        proxy_fence();
        __syncthreads();
    };
    int j = 1;
    for (; j + 1 <= last; j += 2) {
        step(j, p, next);
        step(j + 1, next, p);
    }
    if (j <= last) {  // the last block's P V, from whichever set holds its P
        step(j, p, next);
        issue_values<D, BN>(o, next, v_buf(last));
    } else {
        issue_values<D, BN>(o, p, v_buf(last));
    }
    wgmma_wait<0>();
    hold<D / 2>(o);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffff, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffff, l[r], 2);
    }
    // O out through this warpgroup's rows of the query tile (free since its last S = Q K^T): each thread's pairs
    // into the tile, then whole rows by 16-byte stores (the tile's swizzle keeps both sides free of bank conflicts)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float inv = 1.f / l[r];  // a row past the last token: never stored
        const int row = row_a - q0 + r * 8;
#pragma unroll
        for (int t = 0; t < D / 8; ++t) {
            const __nv_bfloat162 pair = __floats2bfloat162_rn(o[4 * t + r * 2] * inv, o[4 * t + r * 2 + 1] * inv);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(q_s + tile_offset(BM, row, t * 8 + 2 * (lane % 4))),
                         "r"(*reinterpret_cast<const uint32_t*>(&pair)));
        }
    }
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");  // this warpgroup's rows are in the tile
    constexpr int CHUNKS = D / 8;
#pragma unroll
    for (int i = 0; i < 64 * CHUNKS / 128; ++i) {
        const int c = tid % 128 + i * 128, row = wg * 64 + c / CHUNKS, col = (c % CHUNKS) * 8;
        if (q0 + row >= tokens) continue;
        uint4 v;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(q_s + tile_offset(BM, row, col)));
        *reinterpret_cast<uint4*>(out + (((int64_t)b * tokens + q0 + row) * heads + h) * D + col) = v;
    }
}

template <int D, int BN>
cudaError_t launch(int batch, int heads, int group, int tokens, const bf16* q, const bf16* k, const bf16* v,
                   bf16* out, const int64_t* st, const bf16* cos, const bf16* sin, int64_t table_b, int64_t table_t,
                   float scale_log2, cudaStream_t stream) {
    constexpr int SMEM = (BM + 2 * stages(BN) * BN) * D * 2 + 1024 + 16;  // + the 1024-byte alignment, the scratch
    static const cudaError_t allowed =
        cudaFuncSetAttribute(causal_attention_kernel<D, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    if (allowed != cudaSuccess) return allowed;
    const dim3 grid((tokens + BM - 1) / BM, batch * heads);
    causal_attention_kernel<D, BN><<<grid, THREADS, SMEM, stream>>>(
        q, k, v, out, heads, group, tokens, st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7], st[8], cos, sin,
        table_b, table_t, scale_log2);
    return cudaGetLastError();
}

}  // namespace

// q [B, H, T, D], k and v [B, H / group, T, D] by strides (9: b, h, t of q, k, v); cos and sin null, or [T, D]
// rows of each batch (`table_b` apart; 0: one table for all) `table_t` apart, applied to q as it loads
extern "C" cudaError_t causal_attention_launch(const void* q, const void* k, const void* v, void* out, int batch,
                                               int heads, int group, int tokens, int dim, const int64_t* strides,
                                               const void* cos, const void* sin, int64_t table_b, int64_t table_t,
                                               float scale, cudaStream_t stream) {
    const float scale_log2 = scale * 1.4426950408889634f;
    const auto *qq = (const bf16*)q, *kk = (const bf16*)k, *vv = (const bf16*)v;
    const auto *cc = (const bf16*)cos, *ss = (const bf16*)sin;
    auto* oo = (bf16*)out;
    if (dim == 128)
        return launch<128, ATTENTION_BN>(batch, heads, group, tokens, qq, kk, vv, oo, strides, cc, ss, table_b,
                                         table_t, scale_log2, stream);
    if (dim == 64)
        return launch<64, ATTENTION_BN>(batch, heads, group, tokens, qq, kk, vv, oo, strides, cc, ss, table_b,
                                        table_t, scale_log2, stream);
    return cudaErrorInvalidValue;
}
"""


def _wgmma(n: int, a_in_registers: bool) -> str:
    """The C++ wrapper of one warpgroup MMA, m64n{n}k16 bf16 -> fp32 (its n / 2 accumulators a thread are operands
    one by one): A and B from shared memory (`ss`, K-major both) or A from registers and B N-major (`rs`)."""
    regs = ", ".join(f"%{i}" for i in range(n // 2))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n // 2))
    h = n // 2
    if not a_in_registers:
        return (
            f"__device__ __forceinline__ void wgmma_ss_n{n}(float* d, uint64_t a, uint64_t b, int accumulate) {{\n"
            f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{h + 2}, 0;\\n"\n'
            f'                 "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs}}}, %{h}, %{h + 1}, '
            f'p, 1, 1, 0, 0;\\n}}\\n"\n'
            f"                 : {outs}\n"
            f'                 : "l"(a), "l"(b), "r"(accumulate));\n}}\n'
        )
    return (
        f"__device__ __forceinline__ void wgmma_rs_n{n}(float* d, const uint32_t* a, uint64_t b) {{\n"
        f'    asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs}}}, '
        f'{{%{h}, %{h + 1}, %{h + 2}, %{h + 3}}}, %{h + 4}, 1, 1, 1, 1;\\n"\n'
        f"                 : {outs}\n"
        f'                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));\n}}\n'
    )


def attention_cu(block_n: int = 128, stages: int = 3) -> str:
    """The attention kernel's source, taking `block_n` keys a step (64 or 128; 128 the faster on the H200, 2026-12-02:
    0.259 against 0.268 ms on the Llama region, 0.241 against 0.257 on GPT-2's), with `stages` buffers of K and V at
    64 keys (2 or 3; two at 128)."""
    wrappers = "".join(_wgmma(n, regs) for regs in (False, True) for n in (64, 128))
    source = ATTENTION_TEMPLATE.replace("WGMMA_WRAPPERS", wrappers).replace("ATTENTION_BN", str(block_n))
    source = source.replace("ROTATE_EIGHT", _ROTATE_EIGHT.replace("NAME", "rotate_query_eight"))
    return source.replace("ATTENTION_STAGES", str(stages))


ATTENTION_CU = attention_cu()


def attention_inputs(batch: int, heads: int, tokens: int, dim: int, device: str = "cuda"):
    """q, k, v and the mask as a traced model hands them to attention, bf16: the query projected as [B, T, H, D] and
    seen as [B, H, T, D] (a transposed view), k and v [B, H, T, D], and the causal mask the trace materializes,
    [B, 1, T, T] bool. For the kernel's checks and benchmarks (the caller seeds the generator)."""
    import torch

    q = torch.randn(batch, tokens, heads, dim, device=device, dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(batch, heads, tokens, dim, device=device, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    mask = torch.ones(tokens, tokens, device=device, dtype=torch.bool).tril().expand(batch, 1, tokens, tokens)
    return q, k, v, mask


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
extern "C" cudaError_t causal_attention_launch(const void* q, const void* k, const void* v, void* out, int batch,
                                               int heads, int group, int tokens, int dim, const int64_t* strides,
                                               const void* cos, const void* sin, int64_t table_b, int64_t table_t,
                                               float scale, cudaStream_t stream);

extern "C" cudaError_t add_rmsnorm_launch(const void* x, const void* r, const void* w, void* sum, void* out,
                                          int64_t rows, int64_t cols, float eps, cudaStream_t s);
extern "C" cudaError_t rotary_launch(const void* src, void* dst, const void* cos, const void* sin, int64_t batch,
                                     int64_t tokens, int64_t heads, int64_t dim, int64_t batch_stride,
                                     int64_t token_stride, int repeats, cudaStream_t s);

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

static void expect_heads(const torch::Tensor& t) {
    TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kBFloat16 && t.dim() == 4 && t.stride(3) == 1 &&
                    t.stride(2) % 8 == 0 && t.stride(1) % 8 == 0 && t.stride(0) % 8 == 0 &&
                    (uintptr_t)t.data_ptr() % 16 == 0,
                "expected bfloat16 CUDA tensors [B, H, T, D], the last dimension contiguous, rows 16-byte aligned");
}

static torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor* cos, const torch::Tensor* sin, double scale) {
    const int64_t batch = q.size(0), heads = q.size(1), tokens = q.size(2), dim = q.size(3);
    TORCH_CHECK(dim == 64 || dim == 128, "head dimension 64 or 128");
    TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == batch && k.size(2) == tokens && k.size(3) == dim &&
                    heads % k.size(1) == 0,
                "k and v: [B, H / group, T, D] beside q [B, H, T, D]");
    const c10::cuda::CUDAGuard guard(q.device());
    auto out = torch::empty({batch, tokens, heads * dim}, q.options());
    const int64_t strides[9] = {q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1),
                                k.stride(2), v.stride(0), v.stride(1), v.stride(2)};
    const int64_t table_b = cos && cos->size(0) > 1 ? cos->stride(0) : 0, table_t = cos ? cos->stride(2) : 0;
    const cudaError_t err = causal_attention_launch(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), (int)batch, (int)heads, (int)(heads / k.size(1)),
        (int)tokens, (int)dim, strides, cos ? cos->data_ptr() : nullptr, sin ? sin->data_ptr() : nullptr, table_b,
        table_t, (float)scale, c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "causal attention kernel: ", cudaGetErrorString(err));
    return out;
}

// causal attention over q [B, H, T, D], k and v [B, H / group, T, D] (GQA: query head h reads key head h / group),
// written as [B, T, H * D]: the model's attention, its transpose and its reshape; the mask the model builds is
// causal, so it is never read
static torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      double scale) {
    for (const auto* t : {&q, &k, &v}) expect_heads(*t);
    return attention(q, k, v, nullptr, nullptr, scale);
}

// Llama's attention from its projections' outputs: q [B, T, H * D], k and v [B, T, Hk * D], the rotary tables cos
// and sin [B or 1, 1, T, D]. k gets the rotary embedding in a pass of its own (it is read by H / Hk query heads and
// every query block after it), q as each block loads it; k and v are read at their own head count (GQA's repeat is
// the kernel's indexing), and the output is [B, T, H * D] as the model's reshape after attention
static torch::Tensor rotary_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cos, const torch::Tensor& sin, double scale) {
    expect(q), expect(k), expect(v);
    for (const auto* t : {&cos, &sin})
        TORCH_CHECK(t->is_cuda() && t->scalar_type() == torch::kBFloat16 && t->dim() == 4 && t->stride(3) == 1 &&
                        t->stride(2) % 8 == 0,
                    "cos and sin: bfloat16 CUDA tensors [B or 1, 1, T, D] with the last dimension contiguous");
    TORCH_CHECK(sin.sizes() == cos.sizes() && sin.strides() == cos.strides(), "cos and sin differ in layout");
    TORCH_CHECK(q.dim() == 3 && k.sizes() == v.sizes() && k.dim() == 3, "q, k, v: [B, T, heads * D]");
    const int64_t batch = q.size(0), tokens = q.size(1), dim = cos.size(3);
    TORCH_CHECK(k.size(0) == batch && k.size(1) == tokens && cos.size(2) == tokens &&
                    (cos.size(0) == 1 || cos.size(0) == batch) && dim % 16 == 0 && q.size(2) % dim == 0 &&
                    k.size(2) % dim == 0 && (q.size(2) / dim) % (k.size(2) / dim) == 0,
                "q, k, v and the rotary tables do not match");
    const int64_t heads = q.size(2) / dim, kv_heads = k.size(2) / dim;
    const c10::cuda::CUDAGuard guard(q.device());
    auto k_rot = torch::empty({batch, kv_heads, tokens, dim}, k.options());
    const cudaError_t err = rotary_launch(k.data_ptr(), k_rot.data_ptr(), cos.data_ptr(), sin.data_ptr(), batch,
                                          tokens, kv_heads, dim, cos.size(0) == 1 ? 0 : cos.stride(0),
                                          cos.stride(2), 1, c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "rotary kernel: ", cudaGetErrorString(err));
    const auto q_heads = q.view({batch, tokens, heads, dim}).transpose(1, 2);
    const auto v_heads = v.view({batch, tokens, kv_heads, dim}).transpose(1, 2);
    return attention(q_heads, k_rot, v_heads, &cos, &sin, scale);
}

// the residual add and RMSNorm over the last dimension: (x + r, w * norm(x + r)), rounded as the model rounds
static std::tuple<torch::Tensor, torch::Tensor> add_rmsnorm(const torch::Tensor& x, const torch::Tensor& r,
                                                            const torch::Tensor& w, double eps) {
    expect(x), expect(r), expect(w);
    TORCH_CHECK(r.sizes() == x.sizes() && w.dim() == 1 && w.size(0) == x.size(-1), "shapes do not match");
    const c10::cuda::CUDAGuard guard(x.device());
    auto sum = torch::empty_like(x), out = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    const cudaError_t err = add_rmsnorm_launch(x.data_ptr(), r.data_ptr(), w.data_ptr(), sum.data_ptr(),
                                               out.data_ptr(), x.numel() / cols, cols, (float)eps,
                                               c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "add_rmsnorm kernel: ", cudaGetErrorString(err));
    return {sum, out};
}

static torch::Tensor rmsnorm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
    expect(x), expect(w);
    TORCH_CHECK(w.dim() == 1 && w.size(0) == x.size(-1), "shapes do not match");
    const c10::cuda::CUDAGuard guard(x.device());
    auto out = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    const cudaError_t err = add_rmsnorm_launch(x.data_ptr(), nullptr, w.data_ptr(), nullptr, out.data_ptr(),
                                               x.numel() / cols, cols, (float)eps,
                                               c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "rmsnorm kernel: ", cudaGetErrorString(err));
    return out;
}

// shapes alone, for tracing (torch.compile, the put-back)
static std::tuple<torch::Tensor, torch::Tensor> add_rmsnorm_meta(const torch::Tensor& x, const torch::Tensor& r,
                                                                 const torch::Tensor& w, double eps) {
    return {torch::empty_like(x), torch::empty_like(x)};
}

static torch::Tensor rmsnorm_meta(const torch::Tensor& x, const torch::Tensor& w, double eps) {
    return torch::empty_like(x);
}

static torch::Tensor conv1d_gelu_meta(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    return torch::empty(with_last(x, w.size(1)), x.options());
}

static torch::Tensor swiglu_meta(const torch::Tensor& x, const torch::Tensor& wg, const torch::Tensor& wu) {
    return torch::empty(with_last(x, wg.size(0)), x.options());
}

static torch::Tensor causal_attention_meta(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           double scale) {
    return torch::empty({q.size(0), q.size(2), q.size(1) * q.size(3)}, q.options());
}

static torch::Tensor rotary_attention_meta(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const torch::Tensor& cos, const torch::Tensor& sin, double scale) {
    return torch::empty_like(q);
}

TORCH_LIBRARY(NAMESPACE, m) {
    m.def("conv1d_gelu(Tensor x, Tensor w, Tensor b) -> Tensor");
    m.def("swiglu(Tensor x, Tensor wg, Tensor wu) -> Tensor");
    m.def("causal_attention(Tensor q, Tensor k, Tensor v, float scale) -> Tensor");
    m.def("add_rmsnorm(Tensor x, Tensor r, Tensor w, float eps) -> (Tensor, Tensor)");
    m.def("rmsnorm(Tensor x, Tensor w, float eps) -> Tensor");
    m.def("rotary_attention(Tensor q, Tensor k, Tensor v, Tensor cos, Tensor sin, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(NAMESPACE, CUDA, m) {
    m.impl("conv1d_gelu", &conv1d_gelu);
    m.impl("swiglu", &swiglu);
    m.impl("causal_attention", &causal_attention);
    m.impl("add_rmsnorm", &add_rmsnorm);
    m.impl("rmsnorm", &rmsnorm);
    m.impl("rotary_attention", &rotary_attention);
}

TORCH_LIBRARY_IMPL(NAMESPACE, Meta, m) {
    m.impl("conv1d_gelu", &conv1d_gelu_meta);
    m.impl("swiglu", &swiglu_meta);
    m.impl("causal_attention", &causal_attention_meta);
    m.impl("add_rmsnorm", &add_rmsnorm_meta);
    m.impl("rmsnorm", &rmsnorm_meta);
    m.impl("rotary_attention", &rotary_attention_meta);
}
"""

CONV_CU = r"""// Batch norm folded into a convolution's weights and bias (eval mode: running statistics), fp32:
// w'[o, ...] = w[o, ...] * g[o] / sqrt(v[o] + eps), b'[o] = beta[o] - m[o] * g[o] / sqrt(v[o] + eps).
#include <cuda_runtime.h>
#include <cstdint>

__global__ void fold_bn_kernel(const float* __restrict__ w, const float* __restrict__ g, const float* __restrict__ beta,
                               const float* __restrict__ m, const float* __restrict__ v, float eps, int64_t per_out,
                               int64_t outs, float* __restrict__ w2, float* __restrict__ b2) {
    const int64_t total = per_out * outs;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = i / per_out;
        const float scale = g[o] * rsqrtf(v[o] + eps);
        w2[i] = w[i] * scale;
        if (i % per_out == 0) b2[o] = beta[o] - m[o] * scale;
    }
}

extern "C" cudaError_t fold_bn_launch(const float* w, const float* g, const float* beta, const float* m, const float* v,
                                      float eps, int64_t per_out, int64_t outs, float* w2, float* b2, cudaStream_t s) {
    const int64_t total = per_out * outs;
    const int blocks = (int)((total + 255) / 256 < 4096 ? (total + 255) / 256 : 4096);
    fold_bn_kernel<<<blocks, 256, 0, s>>>(w, g, beta, m, v, eps, per_out, outs, w2, b2);
    return cudaGetLastError();
}
"""

CONV_BINDING_CPP = r"""// conv2d + batch norm (eval) [+ residual] [+ ReLU] as one cuDNN call: the batch norm folded into
// the weights and bias by fold_bn_launch, then cudnnConvolutionBiasActivationForward:
// y = act(conv(x, w') + b' + residual).
#include <torch/types.h>
#include <torch/library.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cudnn.h>
#include <cuda_runtime.h>

extern "C" cudaError_t fold_bn_launch(const float* w, const float* g, const float* beta, const float* m, const float* v,
                                      float eps, int64_t per_out, int64_t outs, float* w2, float* b2, cudaStream_t s);

#define CUDNN_OK(call)                                                                            \
    do {                                                                                          \
        const cudnnStatus_t st_ = (call);                                                         \
        TORCH_CHECK(st_ == CUDNN_STATUS_SUCCESS, #call, ": ", cudnnGetErrorString(st_));          \
    } while (0)

static cudnnHandle_t handle() {  // one per process, made on first use and kept (never destroyed)
    static cudnnHandle_t h = nullptr;
    if (h == nullptr) CUDNN_OK(cudnnCreate(&h));
    return h;
}

static void expect(const torch::Tensor& t, int64_t dim) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32 && t.dim() == dim,
                "expected a contiguous float32 CUDA tensor of ", dim, " dimensions");
}

static std::vector<int64_t> out_shape(const torch::Tensor& x, const torch::Tensor& w, at::IntArrayRef stride,
                                      at::IntArrayRef padding) {
    return {x.size(0), w.size(0), (x.size(2) + 2 * padding[0] - w.size(2)) / stride[0] + 1,
            (x.size(3) + 2 * padding[1] - w.size(3)) / stride[1] + 1};
}

static torch::Tensor conv_bn_act(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& gamma,
                                 const torch::Tensor& beta, const torch::Tensor& mean, const torch::Tensor& var,
                                 const c10::optional<torch::Tensor>& residual, at::IntArrayRef stride,
                                 at::IntArrayRef padding, double eps, bool relu) {
    expect(x, 4), expect(w, 4);
    for (const auto* t : {&gamma, &beta, &mean, &var}) expect(*t, 1);
    TORCH_CHECK(stride.size() == 2 && padding.size() == 2, "stride and padding: two values each");
    TORCH_CHECK(w.size(1) == x.size(1), "the weight's input channels differ from x's");
    const c10::cuda::CUDAGuard guard(x.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    const int64_t outs = w.size(0), per_out = w.numel() / outs;
    auto w2 = torch::empty_like(w);
    auto b2 = torch::empty({outs}, w.options());
    const cudaError_t err = fold_bn_launch(w.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(),
                                           mean.data_ptr<float>(), var.data_ptr<float>(), (float)eps, per_out, outs,
                                           w2.data_ptr<float>(), b2.data_ptr<float>(), stream);
    TORCH_CHECK(err == cudaSuccess, "fold_bn kernel: ", cudaGetErrorString(err));
    auto y = torch::empty(out_shape(x, w, stride, padding), x.options());
    if (residual.has_value()) {
        expect(*residual, 4);
        TORCH_CHECK(residual->sizes() == y.sizes(), "the residual's shape differs from the convolution's output");
    }

    cudnnHandle_t h = handle();
    CUDNN_OK(cudnnSetStream(h, stream));
    cudnnTensorDescriptor_t xd, yd, bd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnActivationDescriptor_t ad;
    CUDNN_OK(cudnnCreateTensorDescriptor(&xd));
    CUDNN_OK(cudnnCreateTensorDescriptor(&yd));
    CUDNN_OK(cudnnCreateTensorDescriptor(&bd));
    CUDNN_OK(cudnnCreateFilterDescriptor(&wd));
    CUDNN_OK(cudnnCreateConvolutionDescriptor(&cd));
    CUDNN_OK(cudnnCreateActivationDescriptor(&ad));
    CUDNN_OK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)x.size(0), (int)x.size(1),
                                        (int)x.size(2), (int)x.size(3)));
    CUDNN_OK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)y.size(0), (int)y.size(1),
                                        (int)y.size(2), (int)y.size(3)));
    CUDNN_OK(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)outs, 1, 1));
    CUDNN_OK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)outs, (int)w.size(1),
                                        (int)w.size(2), (int)w.size(3)));
    CUDNN_OK(cudnnSetConvolution2dDescriptor(cd, (int)padding[0], (int)padding[1], (int)stride[0], (int)stride[1], 1,
                                             1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    // TF32 tensor cores for fp32 data (cuDNN's default math on Ampere and later), as PyTorch's convolutions use by
    // default (torch.backends.cudnn.allow_tf32); never a conversion to fp16, whose range stressed inputs overflow
    CUDNN_OK(cudnnSetConvolutionMathType(cd, CUDNN_DEFAULT_MATH));
    CUDNN_OK(cudnnSetActivationDescriptor(ad, relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                          CUDNN_NOT_PROPAGATE_NAN, 0.0));
    // identity is fused only with the implicit precomputed GEMM; with ReLU, cuDNN's heuristic choice
    cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    if (relu) {
        cudnnConvolutionFwdAlgoPerf_t perf[8];
        int returned = 0;
        CUDNN_OK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 8, &returned, perf));
        for (int i = 0; i < returned; ++i) {
            if (perf[i].status == CUDNN_STATUS_SUCCESS) {
                algo = perf[i].algo;
                break;
            }
        }
    }
    size_t ws_size = 0;
    CUDNN_OK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &ws_size));
    auto ws = torch::empty({(int64_t)ws_size + 1}, x.options().dtype(torch::kUInt8));
    const float one = 1.f, zero = 0.f;
    const void* z = residual.has_value() ? residual->data_ptr() : y.data_ptr();
    CUDNN_OK(cudnnConvolutionBiasActivationForward(h, &one, xd, x.data_ptr(), wd, w2.data_ptr(), cd, algo,
                                                   ws.data_ptr(), ws_size, residual.has_value() ? &one : &zero, yd, z,
                                                   bd, b2.data_ptr(), ad, yd, y.data_ptr()));
    cudnnDestroyActivationDescriptor(ad);
    cudnnDestroyConvolutionDescriptor(cd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyTensorDescriptor(bd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyTensorDescriptor(xd);
    return y;
}

static torch::Tensor conv_bn_act_meta(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& gamma,
                                      const torch::Tensor& beta, const torch::Tensor& mean, const torch::Tensor& var,
                                      const c10::optional<torch::Tensor>& residual, at::IntArrayRef stride,
                                      at::IntArrayRef padding, double eps, bool relu) {
    return torch::empty(out_shape(x, w, stride, padding), x.options());
}

TORCH_LIBRARY(NAMESPACE, m) {
    m.def("conv_bn_act(Tensor x, Tensor w, Tensor gamma, Tensor beta, Tensor mean, Tensor var, Tensor? residual, "
          "int[] stride, int[] padding, float eps, bool relu) -> Tensor");
}

TORCH_LIBRARY_IMPL(NAMESPACE, CUDA, m) { m.impl("conv_bn_act", &conv_bn_act); }

TORCH_LIBRARY_IMPL(NAMESPACE, Meta, m) { m.impl("conv_bn_act", &conv_bn_act_meta); }
"""

MODEL_NEW = """import torch
import torch.nn as nn

import cuda_extension  # noqa: F401  (loading it registers the operators)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
{params}

    def forward(self, {args}):
        return {call}
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
        f"        self.{k} = nn.Parameter(torch.empty({tuple(v.shape)}, dtype={v.dtype}), requires_grad=False)"
        for k, v in state.items()
    )
    if is_convolution(task):
        call = convolution_call(task, namespace(task))
        return None if call is None else MODEL_NEW.format(params=params, call=call, args=forward_args(task))
    if any(v.dtype != torch.bfloat16 for v in state.values()):
        return None
    args = "x"
    scale = re.search(r"scaled_dot_product_attention\.default\([^)]*scale = ([0-9.e-]+)\)", task)
    tail = calls[-3:-1] if calls[-1] == "view" else calls[-2:]
    causal = "scaled_dot_product_attention" in calls and "arange" in calls  # a mask built from shapes alone
    if causal and not state and scale and tail == ["transpose", "reshape"]:  # the evaluator checks it is causal
        if {"neg", "cat"} <= set(calls):  # Llama's: from the projections, with the rotary embedding and GQA's repeat
            call = _rotary_attention(task, float(scale.group(1)))
            return None if call is None else MODEL_NEW.format(params="", call=call, args=forward_args(task))
        args, call = "q, k, v", f"torch.ops.{namespace(task)}.causal_attention(q, k, v, {float(scale.group(1))!r})"
        if calls[-1] == "view":  # GPT-2's view for the projection after it
            call += f".view({views[-1]})"
        return MODEL_NEW.format(params="", call=call, args=args)
    norm = _norm(task, calls, state)
    if norm is not None:
        return MODEL_NEW.format(params=params, call=norm, args=forward_args(task))
    if "addmm" in calls and "tanh" in calls and len(state) == 2:  # GPT-2's Conv1D + bias + tanh GELU
        w = next(k for k, v in state.items() if v.dim() == 2)
        b = next(k for k, v in state.items() if v.dim() == 1)
        call = f"torch.ops.{namespace(task)}.conv1d_gelu(x.contiguous(), self.{w}, self.{b})"
    elif calls.count("linear") == 2 and "silu" in calls and "mul" in calls and len(state) == 2:  # SwiGLU
        gate = next(k for k in state if "gate" in k)
        up = next(k for k in state if "up" in k)
        call = f"torch.ops.{namespace(task)}.swiglu(x.contiguous(), self.{gate}, self.{up})"
    else:
        return None
    if calls[-1] == "view":  # the region ends in a view of its result: the kernel's output, viewed alike
        call += f".view({views[-1]})"
    return MODEL_NEW.format(params=params, call=call, args=args)


def _norm(task: str, calls: list[str], state: dict) -> str | None:
    """ModelNew's forward for a Llama norm region (RMSNorm, with the residual add before it or not) as one expression;
    None for any other region."""
    ns, inputs = namespace(task), [a.strip() for a in forward_args(task).split(",")]
    if len(state) != 1 or not {"pow", "mean", "rsqrt"} <= set(calls) or "linear" in calls:
        return None
    (w,) = state
    eps = re.search(r"aten\.add\.Tensor\(mean\w*, ([0-9.e-]+)\)", task).group(1)
    if calls[0] != "add" and len(inputs) == 1:
        return f"torch.ops.{ns}.rmsnorm({inputs[0]}.contiguous(), self.{w}, {eps})"
    if calls[0] != "add" or len(inputs) != 2:
        return None
    call = f"torch.ops.{ns}.add_rmsnorm({inputs[0]}.contiguous(), {inputs[1]}.contiguous(), self.{w}, {eps})"
    residual = re.search(r"(\w+) = torch\.ops\.aten\.add\.Tensor\(", task).group(1)
    pair = re.search(r"return \((\w+), (\w+)\)", task)
    if pair is None:
        return call + "[1]"
    return call if pair.group(1) == residual else None


def _rotary_attention(task: str, scale: float) -> str | None:
    """ModelNew's forward for a Llama attention region (its inputs the q, k and v projections' outputs and the
    rotary tables) as one `rotary_attention` call, each input found by what the task's forward does with it: q and k
    are multiplied by both tables (cos by the rotated value itself, sin by the half-swapped one), v by neither."""
    inputs = [a.strip() for a in forward_args(task).split(",")]
    reads: dict[str, set] = {name: {name} for name in inputs}  # a value -> the inputs it is computed from
    for name, body in re.findall(r"(\w+) = torch\.ops\.aten\.\w+\.\w+\((.*?)\)(?:;|\n)", task):
        reads[name] = set().union(*(reads.get(token, set()) for token in re.findall(r"\w+", body)))
    sdpa = re.search(r"aten\.scaled_dot_product_attention\.default\((\w+), (\w+), (\w+)", task)
    products = re.findall(r"aten\.mul\.Tensor\((\w+), (\w+)\)", task)
    if sdpa is None:
        return None
    q_reads, k_reads, v_reads = (reads.get(sdpa.group(i), set()) for i in (1, 2, 3))
    tables = q_reads & k_reads
    cos = {t for x, t in products if t in tables and not x.startswith("cat")}
    sin = {t for x, t in products if t in tables and x.startswith("cat")}
    q, k, v = q_reads - tables, k_reads - tables, v_reads
    if not all(len(found) == 1 for found in (q, k, v, cos, sin)) or len(tables) != 2:
        return None
    names = [next(iter(found)) for found in (q, k, v, cos, sin)]
    return f"torch.ops.{namespace(task)}.rotary_attention({', '.join(names)}, {scale!r})"


CONVOLUTION_OPS = {"conv2d", "batch_norm", "add", "relu_", "relu"}


def is_convolution(task: str) -> bool:
    """A region of convolutions with their batch norm, residual adds and ReLUs (ResNet's), and nothing else."""
    calls = set(re.findall(r"torch\.ops\.aten\.(\w+)\.\w+\(", task))
    return "conv2d" in calls and calls <= CONVOLUTION_OPS


def forward_args(task: str) -> str:
    return re.search(r"def forward\(self, ([^)]*)\):", task).group(1)


def _split(body: str) -> list[str]:
    """A call's arguments, split at the commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in body:
        depth += ch == "[" or -(ch == "]")
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return [*parts, current.strip()] if current.strip() else parts


def convolution_call(task: str, ns: str) -> str | None:
    """ModelNew's forward for a convolution region as one expression: each conv2d with the batch norm after it (and
    the residual added to it, and the ReLU after that) one `conv_bn_act` call; None where the region has anything
    else (a bias, dilation, groups, a batch norm in training mode)."""
    inputs = {a.strip() for a in forward_args(task).split(",")}
    alias = dict(re.findall(r"(\w+) = self\.(\w+)\n", task))
    nodes = {
        name: (op, _split(body))
        for name, op, body in re.findall(r"(\w+) = torch\.ops\.aten\.(\w+)\.\w+\((.*?)\)(?:;|\n)", task)
    }
    result = re.search(r"return (\w+)\n", task).group(1)

    class Unsupported(Exception):
        pass

    def value(name: str) -> str:
        if name in inputs:
            return name
        op, args = nodes[name]
        if op in ("relu_", "relu"):
            return fused(args[0], relu=True)
        return fused(name, relu=False)

    def fused(name: str, relu: bool) -> str:
        op, args = nodes.get(name, ("", []))
        residual = "None"
        if op == "add":
            if len(args) != 2:
                raise Unsupported(name)
            main, other = args if nodes.get(args[0], ("",))[0] == "batch_norm" else args[::-1]
            residual, (op, args) = value(other), nodes.get(main, ("", []))
        if op != "batch_norm" or args[5] != "False":
            raise Unsupported(name)
        conv_op, conv = nodes.get(args[0], ("", []))
        if (
            conv_op != "conv2d"
            or conv[2] != "None"
            or conv[5:6] not in ([], ["[1, 1]"])
            or conv[6:7] not in ([], ["1"])
        ):
            raise Unsupported(name)
        stride = conv[3] if len(conv) > 3 else "[1, 1]"
        padding = conv[4] if len(conv) > 4 else "[0, 0]"
        w, (g, b, m, v) = alias[conv[1]], (alias[t] for t in args[1:5])
        return (
            f"torch.ops.{ns}.conv_bn_act({value(conv[0])}, self.{w}, self.{g}, self.{b}, self.{m}, self.{v}, "
            f"{residual}, {stride}, {padding}, {args[7]}, {relu})"
        )

    try:
        return value(result)
    except (Unsupported, KeyError, IndexError):
        return None


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
    if is_convolution(task):
        files = {"kernels/fold_bn.cu": CONV_CU, "kernels/conv_binding.cpp": CONV_BINDING_CPP}
    else:
        files = {
            "kernels/region_lt.cpp": LT_CPP,
            "kernels/region.cu": SWIGLU_CU,
            "kernels/norm_rotary.cu": NORM_ROTARY_CU,
            "kernels/attention.cu": ATTENTION_CU,
            "kernels/region_binding.cpp": BINDING_CPP,
        }
    steps = [
        *(
            {"tool": "write_file", "arguments": {"path": path, "content": text.replace("NAMESPACE", namespace(task))}}
            for path, text in files.items()
        ),
        {"tool": "write_file", "arguments": {"path": "model_new.py", "content": source}},
        {"tool": "compile", "arguments": {}},
        {"tool": "verify", "arguments": {}},
        {"tool": "profile", "arguments": {}},
        {"tool": "finish", "arguments": {"summary": "a fused region kernel bound as a C++ operator"}},
    ]
    return steps[min(step, len(steps) - 1)]
