// Class 6 of the jail's issue: a candidate that takes the whole GPU. Every call allocates device memory in 256 MB
// pieces until none is left and never frees it, then adds the vectors correctly, slowly (a kernel that spins for
// about a second), so that its hold on the device lasts through its neighbours' evaluations.
#include <cuda_runtime.h>

#include <cstdint>

__global__ void vadd_slowly(float* out, const float* a, const float* b, float alpha, int64_t n, long long spin) {
    long long start = clock64();
    while (clock64() - start < spin) {
    }
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = alpha * a[i] + b[i];
}

extern "C" cudaError_t hog_vadd(float* out, const float* a, const float* b, float alpha, int64_t n,
                                cudaStream_t stream) {
    void* piece = nullptr;
    while (cudaMalloc(&piece, 256ll << 20) == cudaSuccess) {
    }
    cudaGetLastError();  // the last, failed allocation is expected
    vadd_slowly<<<264, 256, 0, stream>>>(out, a, b, alpha, n, 2000000000ll);
    return cudaGetLastError();
}
