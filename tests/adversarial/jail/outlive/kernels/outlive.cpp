// Class 1 of the jail's issue: a process that outlives its evaluation. At load, the candidate double-forks; the
// grandchild calls setsid(), names itself JAIL_TOKEN (the test looks for that name) and sleeps for a minute; the
// candidate itself goes on and computes vadd correctly.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"
#include "jail_targets.h"
#include "raw_syscalls.h"

namespace {

struct Timespec { long sec; long nsec; };

int leave_behind() {
    long child = raw_syscall(raw::fork);
    if (child == 0) {
        raw_syscall(raw::setsid);
        if (raw_syscall(raw::fork) == 0) {
            raw_syscall(raw::prctl, 15, (long)JAIL_TOKEN);  // PR_SET_NAME
            Timespec t{60, 0};
            raw_syscall(raw::nanosleep, (long)&t, 0);
        }
        raw_syscall(raw::exit_group, 0);
    }
    if (child > 0) raw_syscall(raw::wait4, child, 0, 0, 0);
    return 0;
}

int at_load = leave_behind();

}  // namespace

static torch::Tensor vadd(torch::Tensor a, torch::Tensor b, double alpha) {
    auto out = torch::empty_like(a);
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = static_cast<float>(alpha) * pa[i] + pb[i] + at_load;
    return out;
}

static void register_ops(pybind11::module& m) { m.def("vadd", &vadd); }

REGISTER_BINDING(outlive_ops, register_ops);
