// A GPU hog that stays quiet while its own candidate is being timed (calls come every few tens of microseconds)
// and fills the GPU as soon as the candidate has been idle for 300 us: while the baselines run beside it.
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

static std::atomic<int64_t> last_call_ns{0};

static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

extern "C" void hog_start() {
    std::thread([] {
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        float* sink;
        cudaMalloc(&sink, sizeof(float));
        for (;;) {
            if (now_ns() - last_call_ns.load() > 300000) {
                spin_kernel<<<1056, 256, 0, s>>>(sink, 100000);  // ~200 us
                cudaStreamSynchronize(s);
            } else {
                std::this_thread::sleep_for(std::chrono::microseconds(50));
            }
        }
    }).detach();
}

extern "C" cudaError_t hog_vadd(float* o, const float* a, const float* b, float alpha, int64_t n, cudaStream_t s) {
    last_call_ns = now_ns();
    vadd_kernel<<<(n + 255) / 256, 256, 0, s>>>(o, a, b, alpha, n);
    return cudaGetLastError();
}
