// Row softmax on the CPU: per row, the max, then the sum of exponentials, then the normalized write.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cmath>

#include "binding_registry.h"

static void softmax_rows(float* out, const float* x, int64_t rows, int64_t cols) {
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = out + r * cols;
        float mx = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
        double sum = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            float e = std::exp(xr[c] - mx);
            yr[c] = e;
            sum += e;
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
}

static torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "softmax_forward: expected a contiguous float32 CPU tensor");
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "softmax_forward: empty last dimension");
    auto out = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    softmax_rows(out.data_ptr<float>(), x.data_ptr<float>(), x.numel() / cols, cols);
    return out;
}

static void register_softmax(pybind11::module& m) { m.def("softmax_forward", &softmax_forward); }

REGISTER_BINDING(softmax, register_softmax);
