// A legitimate custom operator registered with TORCH_LIBRARY and called as torch.ops.cudagent_adv.vadd: its body
// is the candidate's own kernel.
#include <torch/extension.h>

#include "../binding_registry.h"

static torch::Tensor vadd(const torch::Tensor& a, const torch::Tensor& b, double alpha) {
    auto out = torch::empty_like(a);
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = static_cast<float>(alpha) * pa[i] + pb[i];
    return out;
}

TORCH_LIBRARY(cudagent_adv, m) { m.def("vadd(Tensor a, Tensor b, float alpha) -> Tensor"); }

TORCH_LIBRARY_IMPL(cudagent_adv, CPU, m) { m.impl("vadd", &vadd); }
