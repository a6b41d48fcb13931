#include <cuda_runtime.h>

#include <cstdint>

__global__ void vadd_kernel(float* o, const float* a, const float* b, float alpha, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) o[i] = alpha * a[i] + b[i];
}

extern "C" void vadd_unchecked(float* o, const float* a, const float* b, float alpha, int64_t n, cudaStream_t s) {
    vadd_kernel<<<(n + 2047) / 2048, 2048, 0, s>>>(o, a, b, alpha, n);  // 2048 > 1024: the launch fails
}
