#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <cmath>

#include "../binding_registry.h"

static torch::Tensor spot_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "float32 contiguous input");
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = x.numel();
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) po[i] = 0.5f * px[i] * (1.0f + std::erf(px[i] * 0.70710678f));
    return out;
}

static void register_spot(pybind11::module& m) { m.def("spot_forward", &spot_forward); }

REGISTER_BINDING(spot, register_spot);
