#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

static torch::Tensor vadd(torch::Tensor a, torch::Tensor b, double alpha) { return torch::add(torch::mul(a, alpha), b); }

static void register_vadd(pybind11::module& m) { m.def("vadd", &vadd); }
REGISTER_BINDING(vadd, register_vadd);
