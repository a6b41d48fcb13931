// The Linear layer's epilogue, in place on the GEMM's output: y = gelu_tanh(y + bias[col]).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float gelu_tanh(float v) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    return 0.5f * v * (1.f + tanhf(k0 * (v + k1 * v * v * v)));
}

__global__ void bias_gelu_tanh(float* __restrict__ y, const float* __restrict__ bias, int64_t n, int64_t cols) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = gelu_tanh(y[i] + bias[i % cols]);
}

extern "C" cudaError_t bias_gelu_tanh_launch(float* y, const float* bias, int64_t rows, int64_t cols,
                                             cudaStream_t stream) {
    const int64_t n = rows * cols;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 132 * 16);
    if (n > 0) bias_gelu_tanh<<<blocks, threads, 0, stream>>>(y, bias, n, cols);
    return cudaGetLastError();
}
