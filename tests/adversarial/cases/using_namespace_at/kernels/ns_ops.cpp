// ATen called without the at:: prefix: nothing for a scan of qualified names to find.
#include <torch/extension.h>

#include "../binding_registry.h"

using namespace at;

static Tensor vadd(Tensor a, Tensor b, double alpha) { return add(mul(a, alpha), b); }

static void register_ops(pybind11::module& m) { m.def("vadd", &vadd); }

REGISTER_BINDING(ns_ops, register_ops);
