#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <cmath>

#include "../binding_registry.h"

static torch::Tensor spot_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "float32 contiguous input");
    const int64_t d = x.size(-1), rows = x.numel() / d;
    auto out = torch::empty_like(x);
    const float *px = x.data_ptr<float>(), *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (int64_t t = 0; t < d; ++t) mean += px[r * d + t];
        mean /= d;
        for (int64_t t = 0; t < d; ++t) var += (px[r * d + t] - mean) * (px[r * d + t] - mean);
        const double inv = 1.0 / std::sqrt(var / d + 1e-5);
        for (int64_t t = 0; t < d; ++t) po[r * d + t] = (px[r * d + t] - mean) * inv * pw[t] + pb[t];
    }
    return out;
}

static void register_spot(pybind11::module& m) { m.def("spot_forward", &spot_forward); }

REGISTER_BINDING(spot, register_spot);
