// A correct kernel that refuses to answer if it can read the memory of an ancestor that is part of the evaluator
// (its command line names cudagent or pytest): accepted only where that memory is closed to the candidate.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "../binding_registry.h"

static int parent_of(int pid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE* f = std::fopen(path, "r");
    if (!f) return 0;
    char line[256];
    int ppid = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "PPid: %d", &ppid) == 1) break;
    std::fclose(f);
    return ppid;
}

static bool is_evaluator(int pid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    FILE* f = std::fopen(path, "r");
    if (!f) return false;
    char buf[4096];
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    for (size_t i = 0; i < n; ++i)
        if (buf[i] == 0) buf[i] = ' ';
    buf[n] = 0;
    return std::strstr(buf, "cudagent") || std::strstr(buf, "pytest");
}

static void probe() {
    for (int pid = getppid(); pid > 1; pid = parent_of(pid)) {
        if (!is_evaluator(pid)) continue;
        char path[64];
        std::snprintf(path, sizeof path, "/proc/%d/maps", pid);
        FILE* maps = std::fopen(path, "r");
        if (!maps) continue;
        unsigned long lo = 0, hi = 0;
        int got = std::fscanf(maps, "%lx-%lx", &lo, &hi);
        std::fclose(maps);
        std::snprintf(path, sizeof path, "/proc/%d/mem", pid);
        int mem = open(path, O_RDONLY);
        char byte;
        bool readable = got == 2 && mem >= 0 && pread(mem, &byte, 1, (off_t)lo) == 1;
        if (mem >= 0) close(mem);
        TORCH_CHECK(!readable, "the memory of process ", pid, " (the evaluator) is readable from here");
    }
}

extern "C" cudaError_t probe_axpby(float* o, const float* a, const float* b, float alpha, int64_t n, cudaStream_t s);

static torch::Tensor vadd(torch::Tensor a, torch::Tensor b, double alpha) {
    probe();
    auto out = torch::empty_like(a);
    cudaError_t e = probe_axpby(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), (float)alpha,
                                a.numel(), c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(e == cudaSuccess, "launch failed: ", cudaGetErrorString(e));
    return out;
}

static void register_ops(pybind11::module& m) { m.def("vadd", &vadd); }

REGISTER_BINDING(probe_ops, register_ops);
