// tanh(x * scale + shift) * 0.5 + x on the CPU, scale and shift per channel (the last dimension).
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>

#include "../binding_registry.h"

static torch::Tensor scale_shift_tanh_forward(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
    TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "scale_shift_tanh_forward: expected a contiguous float32 CPU tensor");
    const int64_t C = x.size(-1), rows = x.numel() / C;
    TORCH_CHECK(scale.numel() == C && shift.numel() == C, "scale_shift_tanh_forward: parameter size mismatch");
    auto y = torch::empty_like(x);
    const float *px = x.data_ptr<float>(), *ps = scale.data_ptr<float>(), *pt = shift.data_ptr<float>();
    float* py = y.data_ptr<float>();
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < C; ++c) {
            const float v = px[r * C + c];
            py[r * C + c] = std::tanh(v * ps[c] + pt[c]) * 0.5f + v;
        }
    return y;
}

static void register_sst(pybind11::module& m) { m.def("scale_shift_tanh_forward", &scale_shift_tanh_forward); }

REGISTER_BINDING(scale_shift_tanh, register_sst);
