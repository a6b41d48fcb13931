#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t vadd_side(float* o, const float* a, const float* b, float alpha, int64_t n);

static torch::Tensor vadd(torch::Tensor a, torch::Tensor b, double alpha) {
    auto out = torch::empty_like(a);
    TORCH_CHECK(vadd_side(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), alpha, a.numel()) ==
                cudaSuccess);
    return out;
}

static void register_vadd(pybind11::module& m) { m.def("vadd", &vadd); }
REGISTER_BINDING(vadd, register_vadd);
