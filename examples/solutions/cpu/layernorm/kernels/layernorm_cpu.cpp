// LayerNorm over the last dimension on the CPU: mean and variance in double, then one normalized write.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>

#include "../binding_registry.h"

static void layernorm_rows(float* y, const float* x, const float* w, const float* b, int64_t rows, int64_t n,
                           float eps) {
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            sum += xr[i];
            sq += static_cast<double>(xr[i]) * xr[i];
        }
        const double mean = sum / n;
        const double var = std::max(sq / n - mean * mean, 0.0);
        const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
        const float m = static_cast<float>(mean);
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * inv * w[i] + b[i];
    }
}

static torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "layernorm_forward: expected a contiguous float32 CPU tensor");
    const int64_t n = x.size(-1);
    TORCH_CHECK(w.numel() == n && b.numel() == n && w.is_contiguous() && b.is_contiguous(),
                "layernorm_forward: weight and bias must match the last dimension");
    auto y = torch::empty_like(x);
    layernorm_rows(y.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), x.numel() / n,
                   n, static_cast<float>(eps));
    return y;
}

static void register_layernorm(pybind11::module& m) { m.def("layernorm_forward", &layernorm_forward); }

REGISTER_BINDING(layernorm, register_layernorm);
