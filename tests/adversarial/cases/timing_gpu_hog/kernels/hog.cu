#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

__global__ void vadd_kernel(float* o, const float* a, const float* b, float alpha, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) o[i] = alpha * a[i] + b[i];
}

__global__ void spin_kernel(float* sink, int iterations) {
    float v = threadIdx.x;
    for (int i = 0; i < iterations; ++i) v = v * 0.999f + 1.f;
    if (v == -1.f) sink[0] = v;
}

static std::atomic<bool> busy{false};

extern "C" void hog_set_busy(bool b) { busy = b; }

extern "C" void hog_start() {
    std::thread([] {
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        float* sink;
        cudaMalloc(&sink, sizeof(float));
        for (;;) {
            if (!busy) spin_kernel<<<1024, 256, 0, s>>>(sink, 20000);
            cudaStreamSynchronize(s);
            std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
    }).detach();
}

extern "C" cudaError_t hog_vadd(float* o, const float* a, const float* b, float alpha, int64_t n, cudaStream_t s) {
    vadd_kernel<<<(n + 255) / 256, 256, 0, s>>>(o, a, b, alpha, n);
    return cudaGetLastError();
}
