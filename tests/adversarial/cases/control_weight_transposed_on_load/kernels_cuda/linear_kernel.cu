#include <cuda_runtime.h>

#include <cstdint>

__global__ void linear_t_kernel(float* o, const float* x, const float* wt, const float* b, int64_t m, int64_t k,
                                int64_t n) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j >= n || i >= m) return;
    float acc = b[j];
    for (int64_t p = 0; p < k; ++p) acc += x[i * k + p] * wt[p * n + j];
    o[i * n + j] = acc;
}

extern "C" cudaError_t linear_t(float* o, const float* x, const float* wt, const float* b, int64_t m, int64_t k,
                                int64_t n, cudaStream_t s) {
    dim3 grid((unsigned)((n + 127) / 128), (unsigned)m);
    linear_t_kernel<<<grid, 128, 0, s>>>(o, x, wt, b, m, k, n);
    return cudaGetLastError();
}
