// tanh(x * scale + shift) * 0.5 + x, scale and shift per channel (the last dimension), 16-byte accesses.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

__global__ void sst_vec4(float4* __restrict__ y, const float4* __restrict__ x, const float* __restrict__ scale,
                         const float* __restrict__ shift, int64_t n4, int64_t c4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = (i % c4) * 4;
        const float4 v = x[i];
        y[i] = make_float4(tanhf(v.x * scale[c] + shift[c]) * 0.5f + v.x,
                           tanhf(v.y * scale[c + 1] + shift[c + 1]) * 0.5f + v.y,
                           tanhf(v.z * scale[c + 2] + shift[c + 2]) * 0.5f + v.z,
                           tanhf(v.w * scale[c + 3] + shift[c + 3]) * 0.5f + v.w);
    }
}

__global__ void sst_scalar(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ scale,
                           const float* __restrict__ shift, int64_t n, int64_t channels) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % channels;
        y[i] = tanhf(x[i] * scale[c] + shift[c]) * 0.5f + x[i];
    }
}

extern "C" cudaError_t scale_shift_tanh_launch(float* y, const float* x, const float* scale, const float* shift,
                                               int64_t n, int64_t channels, int sm_count, cudaStream_t stream) {
    const int threads = 256;
    const int64_t max_blocks = (int64_t)sm_count * 16;
    const bool vec4 = channels % 4 == 0 && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
    if (n == 0) return cudaGetLastError();
    if (vec4) {
        const int64_t n4 = n / 4;
        sst_vec4<<<std::min((n4 + threads - 1) / threads, max_blocks), threads, 0, stream>>>(
            reinterpret_cast<float4*>(y), reinterpret_cast<const float4*>(x), scale, shift, n4, channels / 4);
    } else {
        sst_scalar<<<std::min((n + threads - 1) / threads, max_blocks), threads, 0, stream>>>(y, x, scale, shift, n,
                                                                                            channels);
    }
    return cudaGetLastError();
}
