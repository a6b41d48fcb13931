// out = x @ wt + bias, with the weight already transposed to (in, out) when the model's weights were loaded.
#include <torch/extension.h>

#include "../binding_registry.h"

static torch::Tensor linear_t(torch::Tensor x, torch::Tensor wt, torch::Tensor bias) {
    const int64_t m = x.size(0), k = x.size(1), n = wt.size(1);
    auto out = torch::empty({m, n}, x.options());
    const float* px = x.data_ptr<float>();
    const float* pw = wt.data_ptr<float>();
    const float* pb = bias.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) po[i * n + j] = pb[j];
        for (int64_t p = 0; p < k; ++p) {
            const float v = px[i * k + p];
            for (int64_t j = 0; j < n; ++j) po[i * n + j] += v * pw[p * n + j];
        }
    }
    return out;
}

static void register_ops(pybind11::module& m) { m.def("linear_t", &linear_t); }

REGISTER_BINDING(linear_ops, register_ops);
