// Class 4 of the jail's issue, on the GPU: a candidate that leaves a process behind which takes the GPU's memory, so
// that the next candidate process cannot start CUDA (which once made the evaluator run every later candidate
// unconfined). On its first call it double-forks a setsid() process that execs Python (JAIL_PYTHON) with a program
// that allocates 90% of the device's memory through the CUDA driver and holds it for two minutes; JAIL_TOKEN in its
// command line lets the test find it. The vectors are added correctly. With JAIL_LEAVE 0 it is an honest candidate.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"
#include "jail_targets.h"
#include "raw_syscalls.h"

extern "C" cudaError_t vadd_launch(float* out, const float* a, const float* b, float alpha, int64_t n,
                                   cudaStream_t stream);

namespace {

const char* kHold =
    "import ctypes, sys, time\n"
    "c = ctypes.CDLL('libcuda.so.1'); c.cuInit(0); d = ctypes.c_int(); c.cuDeviceGet(ctypes.byref(d), 0)\n"
    "ctx = ctypes.c_void_p(); c.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), d); c.cuCtxSetCurrent(ctx)\n"
    "free, total = ctypes.c_size_t(), ctypes.c_size_t(); c.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))\n"
    "p = ctypes.c_uint64(); c.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(int(free.value * 0.9)))\n"
    "time.sleep(120)\n";

int leave_a_holder() {
    long child = raw_syscall(raw::fork);
    if (child == 0) {
        raw_syscall(raw::setsid);
        if (raw_syscall(raw::fork) == 0) {
            const char* argv[] = {JAIL_PYTHON, "-c", kHold, JAIL_TOKEN, nullptr};
            const char* envp[] = {nullptr};
            raw_syscall(59, (long)JAIL_PYTHON, (long)argv, (long)envp);  // execve
        }
        raw_syscall(raw::exit_group, 0);
    }
    if (child > 0) raw_syscall(raw::wait4, child, 0, 0, 0);
    return 0;
}

}  // namespace

static torch::Tensor vadd(torch::Tensor a, torch::Tensor b, double alpha) {
    static int left = JAIL_LEAVE ? leave_a_holder() : 0;
    TORCH_CHECK(a.is_cuda() && a.is_contiguous() && b.is_contiguous(), "vadd: contiguous CUDA tensors");
    const c10::cuda::CUDAGuard guard(a.device());
    auto out = torch::empty_like(a);
    const cudaError_t err = vadd_launch(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(),
                                        static_cast<float>(alpha) + left, a.numel(),
                                        c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "vadd: ", cudaGetErrorString(err));
    return out;
}

static void register_ops(pybind11::module& m) { m.def("vadd", &vadd); }

REGISTER_BINDING(leftover_ops, register_ops);
