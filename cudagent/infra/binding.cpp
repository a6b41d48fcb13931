// cudagent workspace infrastructure. Do not edit: cudagent checks this file against its hash and restores it
// before every build and evaluation. Kernels register their bindings with REGISTER_BINDING (binding_registry.h).
#include <pybind11/pybind11.h>

#include "binding_registry.h"

PYBIND11_MODULE(cuda_extension, m) {
    m.doc() = "Custom kernels of this cudagent workspace";
    cudagent::apply_bindings(m);
}
