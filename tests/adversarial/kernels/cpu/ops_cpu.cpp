// Building blocks for the adversarial suite, CPU edition. The same functions exist in ../cuda, so a case written
// only in Python runs on both devices. Several are deliberately wrong (uninit_like, axpby_half): cases misuse them.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <c10/util/Half.h>

#include "../binding_registry.h"

static void check(const torch::Tensor& t) {
    TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == torch::kFloat32,
                "expected a contiguous float32 CPU tensor");
}

static torch::Tensor axpby(torch::Tensor a, torch::Tensor b, double alpha) {
    check(a), check(b);
    auto out = torch::empty_like(a);
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = static_cast<float>(alpha) * pa[i] + pb[i];
    return out;
}

static void axpby_(torch::Tensor b, torch::Tensor a, double alpha) {  // b = alpha * a + b, in place
    check(a), check(b);
    const float* pa = a.data_ptr<float>();
    float* pb = b.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) pb[i] = static_cast<float>(alpha) * pa[i] + pb[i];
}

static void axpby_out(torch::Tensor a, torch::Tensor b, double alpha, torch::Tensor out) {
    check(a), check(b), check(out);
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = static_cast<float>(alpha) * pa[i] + pb[i];
}

static torch::Tensor axpby_half(torch::Tensor a, torch::Tensor b, double alpha) {  // writes only the first half
    check(a), check(b);
    auto out = torch::empty_like(a);
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel() / 2; ++i) po[i] = static_cast<float>(alpha) * pa[i] + pb[i];
    return out;
}

static torch::Tensor axpby_fp16(torch::Tensor a, torch::Tensor b, double alpha) {  // result rounded to fp16
    check(a), check(b);
    auto out = torch::empty_like(a);
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    // fp32 arithmetic, the result rounded to fp16: a relative error of at most 2^-11, always inside rtol = 1e-2
    // (rounding the inputs instead can fail legitimately: alpha * a + b cancels on stress inputs)
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = static_cast<float>(c10::Half(static_cast<float>(alpha) * pa[i] + pb[i]));
    return out;
}

static torch::Tensor axpby_scratch(torch::Tensor a, torch::Tensor b, double alpha, torch::Tensor scratch) {
    check(a), check(b), check(scratch);
    TORCH_CHECK(scratch.numel() >= a.numel(), "scratch too small");
    auto out = torch::empty_like(a);
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float *ps = scratch.data_ptr<float>(), *po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) ps[i] = static_cast<float>(alpha) * pa[i];
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = ps[i] + pb[i];
    return out;
}

static torch::Tensor uninit_like(torch::Tensor x) { return torch::empty_like(x); }

static torch::Tensor scale(torch::Tensor x, double s) {
    check(x);
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = static_cast<float>(s) * px[i];
    return out;
}

static torch::Tensor fill_like(torch::Tensor x, double value) {
    auto out = torch::empty_like(x);
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < out.numel(); ++i) po[i] = static_cast<float>(value);
    return out;
}

static torch::Tensor row_mean_strided(torch::Tensor x, int64_t stride) {  // mean of every stride-th element
    check(x);
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    auto out = torch::empty({rows}, x.options());
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        int64_t n = 0;
        for (int64_t c = 0; c < cols; c += stride, ++n) s += px[r * cols + c];
        po[r] = static_cast<float>(s / n);
    }
    return out;
}

static void register_ops(pybind11::module& m) {
    m.def("axpby", &axpby);
    m.def("axpby_", &axpby_);
    m.def("axpby_out", &axpby_out);
    m.def("axpby_half", &axpby_half);
    m.def("axpby_fp16", &axpby_fp16);
    m.def("axpby_scratch", &axpby_scratch);
    m.def("uninit_like", &uninit_like);
    m.def("scale", &scale);
    m.def("fill_like", &fill_like);
    m.def("row_mean_strided", &row_mean_strided);
}

REGISTER_BINDING(adversarial_ops, register_ops);
