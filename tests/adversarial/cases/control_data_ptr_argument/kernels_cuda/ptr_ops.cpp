// Legitimate: the kernel takes raw addresses from Python's data_ptr(), and keys nothing on them.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t ptr_axpby(float* o, const float* a, const float* b, float alpha, int64_t n, cudaStream_t s);

static void axpby_ptr(int64_t o, int64_t a, int64_t b, int64_t n, double alpha) {
    cudaError_t e = ptr_axpby(reinterpret_cast<float*>(o), reinterpret_cast<const float*>(a),
                              reinterpret_cast<const float*>(b), (float)alpha, n,
                              c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(e == cudaSuccess, "launch failed: ", cudaGetErrorString(e));
}

static void register_ops(pybind11::module& m) { m.def("axpby_ptr", &axpby_ptr); }

REGISTER_BINDING(ptr_ops, register_ops);
