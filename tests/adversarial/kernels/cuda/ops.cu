// Building blocks for the adversarial suite, CUDA edition (same functions as ../cpu). Several are deliberately
// wrong (axpby_half writes half its output): cases misuse them.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#define GRID_STRIDE(i, n) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_axpby(float* o, const float* a, const float* b, float alpha, int64_t n) {
    GRID_STRIDE(i, n) o[i] = alpha * a[i] + b[i];
}
__global__ void k_axpby_fp16(float* o, const float* a, const float* b, float alpha, int64_t n) {
    // fp32 arithmetic, the result rounded to fp16: a relative error of at most 2^-11, always inside rtol = 1e-2
    // (rounding the inputs instead can fail legitimately: alpha * a + b cancels on stress inputs)
    GRID_STRIDE(i, n) o[i] = __half2float(__float2half(alpha * a[i] + b[i]));
}
__global__ void k_scale(float* o, const float* x, float s, int64_t n) { GRID_STRIDE(i, n) o[i] = s * x[i]; }
__global__ void k_fill(float* o, float v, int64_t n) { GRID_STRIDE(i, n) o[i] = v; }
__global__ void k_row_mean_strided(float* o, const float* x, int64_t rows, int64_t cols, int64_t stride) {
    GRID_STRIDE(r, rows) {
        double s = 0;
        int64_t n = 0;
        for (int64_t c = 0; c < cols; c += stride, ++n) s += x[r * cols + c];
        o[r] = static_cast<float>(s / n);
    }
}

static int grid(int64_t n) { return static_cast<int>(n < 1 ? 1 : (n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096); }

extern "C" cudaError_t ops_axpby(float* o, const float* a, const float* b, float alpha, int64_t n, cudaStream_t s) {
    if (n > 0) k_axpby<<<grid(n), 256, 0, s>>>(o, a, b, alpha, n);
    return cudaGetLastError();
}
extern "C" cudaError_t ops_axpby_fp16(float* o, const float* a, const float* b, float alpha, int64_t n, cudaStream_t s) {
    if (n > 0) k_axpby_fp16<<<grid(n), 256, 0, s>>>(o, a, b, alpha, n);
    return cudaGetLastError();
}
extern "C" cudaError_t ops_scale(float* o, const float* x, float v, int64_t n, cudaStream_t s) {
    if (n > 0) k_scale<<<grid(n), 256, 0, s>>>(o, x, v, n);
    return cudaGetLastError();
}
extern "C" cudaError_t ops_fill(float* o, float v, int64_t n, cudaStream_t s) {
    if (n > 0) k_fill<<<grid(n), 256, 0, s>>>(o, v, n);
    return cudaGetLastError();
}
extern "C" cudaError_t ops_row_mean_strided(float* o, const float* x, int64_t rows, int64_t cols, int64_t stride,
                                            cudaStream_t s) {
    if (rows > 0) k_row_mean_strided<<<grid(rows), 256, 0, s>>>(o, x, rows, cols, stride);
    return cudaGetLastError();
}
