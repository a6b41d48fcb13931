// Inference BatchNorm2d + ReLU on the CPU: fold each channel's statistics into a scale and a shift, one pass.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../binding_registry.h"

static torch::Tensor bn_relu_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor mean,
                                     torch::Tensor var, double eps) {
    TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32 && x.dim() == 4,
                "bn_relu_forward: expected a contiguous float32 NCHW CPU tensor");
    const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
    std::vector<float> scale(C), shift(C);
    const float *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
    const float *pm = mean.data_ptr<float>(), *pv = var.data_ptr<float>();
    for (int64_t c = 0; c < C; ++c) {
        scale[c] = pw[c] / std::sqrt(pv[c] + static_cast<float>(eps));
        shift[c] = pb[c] - pm[c] * scale[c];
    }
    auto y = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* py = y.data_ptr<float>();
#pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) {
            const int64_t base = (n * C + c) * HW;
            const float s = scale[c], t = shift[c];
            for (int64_t i = 0; i < HW; ++i) py[base + i] = std::max(px[base + i] * s + t, 0.0f);
        }
    return y;
}

static void register_bn_relu(pybind11::module& m) { m.def("bn_relu_forward", &bn_relu_forward); }

REGISTER_BINDING(bn_relu, register_bn_relu);
