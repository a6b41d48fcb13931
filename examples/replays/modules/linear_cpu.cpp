#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <cmath>

#include "../binding_registry.h"

static torch::Tensor spot_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "float32 contiguous input");
    const int64_t k = x.size(-1), n = w.size(0), m = x.numel() / k;
    auto sizes = x.sizes().vec();
    sizes.back() = n;
    auto out = torch::empty(sizes, x.options());
    const float *px = x.data_ptr<float>(), *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
#pragma omp parallel for
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            float acc = pb[j];
            for (int64_t t = 0; t < k; ++t) acc += px[i * k + t] * pw[j * k + t];
            po[i * n + j] = acc;
        }
    return out;
}

static void register_spot(pybind11::module& m) { m.def("spot_forward", &spot_forward); }

REGISTER_BINDING(spot, register_spot);
