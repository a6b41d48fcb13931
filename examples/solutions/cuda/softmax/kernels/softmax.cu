// Row softmax: one block per row; an online (max, sum) pass with warp shuffles, then one normalized write.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

struct MaxSum {
    float m, s;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, a.s + b.s};
    return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warp_reduce(MaxSum v) {
    for (int off = 16; off > 0; off >>= 1) {
        MaxSum o{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)};
        v = combine(v, o);
    }
    return v;
}

template <int THREADS>
__global__ void softmax_rows(float* __restrict__ y, const float* __restrict__ x, int64_t cols) {
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    MaxSum acc{-INFINITY, 0.f};
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) acc = combine(acc, {xr[c], 1.f});
    acc = warp_reduce(acc);
    __shared__ MaxSum partial[THREADS / 32];
    __shared__ MaxSum total;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        MaxSum v = lane < THREADS / 32 ? partial[lane] : MaxSum{-INFINITY, 0.f};
        v = warp_reduce(v);
        if (lane == 0) total = v;
    }
    __syncthreads();
    const float m = total.m, inv = 1.f / total.s;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) yr[c] = __expf(xr[c] - m) * inv;
}

extern "C" cudaError_t softmax_launch(float* y, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows > 0) softmax_rows<512><<<rows, 512, 0, stream>>>(y, x, cols);
    return cudaGetLastError();
}
