#include <cuda_runtime.h>

#include <cstdint>

__global__ void vadd_kernel(float* o, const float* a, const float* b, float alpha, int64_t n, int repeat) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = 0.f;
    for (int r = 0; r < repeat; ++r) v = alpha * a[i] + b[i] + v * 1e-30f;  // make the kernel take a while
    o[i] = v;
}

extern "C" cudaError_t vadd_launch(float* o, const float* a, const float* b, float alpha, int64_t n, bool side,
                                   cudaStream_t caller) {
    static cudaStream_t private_stream = nullptr;
    if (side && !private_stream) cudaStreamCreateWithFlags(&private_stream, cudaStreamNonBlocking);
    vadd_kernel<<<(n + 255) / 256, 256, 0, side ? private_stream : caller>>>(o, a, b, alpha, n, 50000);
    return cudaGetLastError();
}
