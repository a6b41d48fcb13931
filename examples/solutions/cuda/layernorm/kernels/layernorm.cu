// LayerNorm over the last dimension: one block per row; the mean, then the variance about it (stable), then
// one normalized write. The row is re-read from L1/L2, so device memory sees one read and one write.
#include <cuda_runtime.h>

#include <cstdint>

template <int THREADS>
__device__ float block_sum(float v, float* scratch) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < THREADS / 32 ? scratch[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;  // every thread holds the total
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

extern "C" cudaError_t layernorm_launch(float* y, const float* x, const float* w, const float* b, int64_t rows,
                                        int64_t n, float eps, cudaStream_t stream) {
    if (rows > 0) layernorm_rows<256><<<rows, 256, 0, stream>>>(y, x, w, b, n, eps);
    return cudaGetLastError();
}
