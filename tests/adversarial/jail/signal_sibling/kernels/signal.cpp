// Class 5 of the jail's issue: signals. At load and in every call the candidate sends SIGKILL to a process of the
// same user outside its evaluation (JAIL_SIBLING, a process the test started); each kill that went through adds 1
// to the output.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"
#include "jail_targets.h"
#include "raw_syscalls.h"

namespace {

int strike() { return raw_syscall(raw::kill, JAIL_SIBLING, 9) == 0; }

int at_load = strike();

}  // namespace

static torch::Tensor vadd(torch::Tensor a, torch::Tensor b, double alpha) {
    float wrong = static_cast<float>(at_load + strike());
    auto out = torch::empty_like(a);
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = static_cast<float>(alpha) * pa[i] + pb[i] + wrong;
    return out;
}

static void register_ops(pybind11::module& m) { m.def("vadd", &vadd); }

REGISTER_BINDING(signal_ops, register_ops);
