#include <cuda_runtime.h>

#include <cstdint>

__global__ void vadd_kernel(float* out, const float* a, const float* b, float alpha, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = alpha * a[i] + b[i];
}

extern "C" cudaError_t vadd_launch(float* out, const float* a, const float* b, float alpha, int64_t n,
                                   cudaStream_t stream) {
    vadd_kernel<<<264, 256, 0, stream>>>(out, a, b, alpha, n);
    return cudaGetLastError();
}
