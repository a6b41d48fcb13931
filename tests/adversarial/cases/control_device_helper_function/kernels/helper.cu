// Legitimate: a block reduction helper declared the everyday way (`__device__ float ...`, neither static nor
// inline). nvcc emits a host-side stand-in for it whose body calls exit(); nothing of the candidate's calls it.
#include <cuda_runtime.h>

#include <cstdint>

__device__ float axpby_one(float alpha, float a, float b) { return alpha * a + b; }

__global__ void helper_axpby_kernel(float* o, const float* a, const float* b, float alpha, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        o[i] = axpby_one(alpha, a[i], b[i]);
}

extern "C" cudaError_t helper_axpby(float* o, const float* a, const float* b, float alpha, int64_t n, cudaStream_t s) {
    if (n > 0) helper_axpby_kernel<<<(int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096), 256, 0, s>>>(o, a, b, alpha, n);
    return cudaGetLastError();
}
