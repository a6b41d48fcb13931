// Legitimate: the kernel takes raw addresses from Python's data_ptr(), and keys nothing on them.
#include <torch/extension.h>

#include "../binding_registry.h"

static void axpby_ptr(int64_t o, int64_t a, int64_t b, int64_t n, double alpha) {
    float* po = reinterpret_cast<float*>(o);
    const float* pa = reinterpret_cast<const float*>(a);
    const float* pb = reinterpret_cast<const float*>(b);
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<float>(alpha) * pa[i] + pb[i];
}

static void register_ops(pybind11::module& m) { m.def("axpby_ptr", &axpby_ptr); }

REGISTER_BINDING(ptr_ops, register_ops);
