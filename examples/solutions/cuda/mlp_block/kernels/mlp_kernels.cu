// The non-GEMM parts of the MLP block: LayerNorm, the first epilogue (bias + exact GELU, in place) and the second
// epilogue (bias + residual, in place).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

template <int THREADS>
__device__ float block_sum(float v, float* scratch) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < THREADS / 32 ? scratch[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

template <int THREADS>
__global__ void layernorm_rows(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ b, int64_t n, float eps) {
    __shared__ float scratch[32];
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += THREADS) s += xr[i];
    const float mean = block_sum<THREADS>(s, scratch) / n;
    float q = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += THREADS) {
        const float d = xr[i] - mean;
        q += d * d;
    }
    const float inv = rsqrtf(block_sum<THREADS>(q, scratch) / n + eps);
    for (int64_t i = threadIdx.x; i < n; i += THREADS) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

__global__ void bias_gelu_erf(float* __restrict__ h, const float* __restrict__ bias, int64_t n, int64_t cols) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = h[i] + bias[i % cols];
        h[i] = 0.5f * v * (1.f + erff(v * 0.7071067811865476f));
    }
}

__global__ void bias_residual(float* __restrict__ y, const float* __restrict__ bias, const float* __restrict__ x,
                              int64_t n, int64_t cols) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = y[i] + bias[i % cols] + x[i];
}

static int64_t grid_for(int64_t n) { return std::min<int64_t>((n + 255) / 256, 132 * 16); }

extern "C" cudaError_t mlp_layernorm(float* y, const float* x, const float* w, const float* b, int64_t rows,
                                     int64_t n, float eps, cudaStream_t s) {
    if (rows > 0) layernorm_rows<256><<<rows, 256, 0, s>>>(y, x, w, b, n, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t mlp_bias_gelu(float* h, const float* bias, int64_t rows, int64_t cols, cudaStream_t s) {
    if (rows * cols > 0) bias_gelu_erf<<<grid_for(rows * cols), 256, 0, s>>>(h, bias, rows * cols, cols);
    return cudaGetLastError();
}

extern "C" cudaError_t mlp_bias_residual(float* y, const float* bias, const float* x, int64_t rows, int64_t cols,
                                         cudaStream_t s) {
    if (rows * cols > 0) bias_residual<<<grid_for(rows * cols), 256, 0, s>>>(y, bias, x, rows * cols, cols);
    return cudaGetLastError();
}
