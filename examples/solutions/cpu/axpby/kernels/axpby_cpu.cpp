// alpha * a + b on the CPU: one pass, parallel over elements.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

static void axpby_kernel(float* out, const float* a, const float* b, float alpha, int64_t n) {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) out[i] = alpha * a[i] + b[i];
}

static torch::Tensor axpby_forward(torch::Tensor a, torch::Tensor b, double alpha) {
    TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "axpby_forward: expected CPU tensors");
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "axpby_forward: expected contiguous tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "axpby_forward: float32 only");
    TORCH_CHECK(a.sizes() == b.sizes(), "axpby_forward: a and b differ in shape");
    auto out = torch::empty_like(a);
    axpby_kernel(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), static_cast<float>(alpha), a.numel());
    return out;
}

static void register_axpby(pybind11::module& m) {
    m.def("axpby_forward", &axpby_forward, "alpha * a + b", py::arg("a"), py::arg("b"), py::arg("alpha"));
}

REGISTER_BINDING(axpby, register_axpby);
