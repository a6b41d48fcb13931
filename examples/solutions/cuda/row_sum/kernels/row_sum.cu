// Sum over the last dimension: one block per row, 16-byte loads when aligned, warp-shuffle reduction.
#include <cuda_runtime.h>

#include <cstdint>

template <int THREADS>
__global__ void row_sum(float* __restrict__ y, const float* __restrict__ x, int64_t cols, bool vec4) {
    const float* xr = x + blockIdx.x * cols;
    float s = 0.f;
    if (vec4) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (int64_t i = threadIdx.x; i < cols / 4; i += THREADS) {
            const float4 v = x4[i];
            s += (v.x + v.y) + (v.z + v.w);
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += THREADS) s += xr[i];
    }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    __shared__ float partial[THREADS / 32];
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < THREADS / 32 ? partial[threadIdx.x] : 0.f;
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (threadIdx.x == 0) y[blockIdx.x] = s;
    }
}

extern "C" cudaError_t row_sum_launch(float* y, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
    const bool vec4 = cols % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0;
    if (rows > 0) row_sum<256><<<rows, 256, 0, stream>>>(y, x, cols, vec4);
    return cudaGetLastError();
}
