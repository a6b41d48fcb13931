#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "../binding_registry.h"

extern "C" cudaError_t ops_axpby(float* o, const float* a, const float* b, float alpha, int64_t n, cudaStream_t s);
extern "C" cudaError_t ops_axpby_fp16(float* o, const float* a, const float* b, float alpha, int64_t n, cudaStream_t s);
extern "C" cudaError_t ops_scale(float* o, const float* x, float v, int64_t n, cudaStream_t s);
extern "C" cudaError_t ops_fill(float* o, float v, int64_t n, cudaStream_t s);
extern "C" cudaError_t ops_row_mean_strided(float* o, const float* x, int64_t rows, int64_t cols, int64_t stride,
                                            cudaStream_t s);

static cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }
static void check(const torch::Tensor& t) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32,
                "expected a contiguous float32 CUDA tensor");
}
static void ok(cudaError_t e) { TORCH_CHECK(e == cudaSuccess, "launch failed: ", cudaGetErrorString(e)); }

static torch::Tensor axpby(torch::Tensor a, torch::Tensor b, double alpha) {
    check(a), check(b);
    auto out = torch::empty_like(a);
    ok(ops_axpby(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), (float)alpha, a.numel(), stream()));
    return out;
}
static void axpby_(torch::Tensor b, torch::Tensor a, double alpha) {
    check(a), check(b);
    ok(ops_axpby(b.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), (float)alpha, a.numel(), stream()));
}
static void axpby_out(torch::Tensor a, torch::Tensor b, double alpha, torch::Tensor out) {
    check(a), check(b), check(out);
    ok(ops_axpby(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), (float)alpha, a.numel(), stream()));
}
static torch::Tensor axpby_half(torch::Tensor a, torch::Tensor b, double alpha) {
    check(a), check(b);
    auto out = torch::empty_like(a);
    ok(ops_axpby(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), (float)alpha, a.numel() / 2,
                 stream()));
    return out;
}
static torch::Tensor axpby_fp16(torch::Tensor a, torch::Tensor b, double alpha) {
    check(a), check(b);
    auto out = torch::empty_like(a);
    ok(ops_axpby_fp16(out.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), (float)alpha, a.numel(),
                      stream()));
    return out;
}
static torch::Tensor axpby_scratch(torch::Tensor a, torch::Tensor b, double alpha, torch::Tensor scratch) {
    check(a), check(b), check(scratch);
    TORCH_CHECK(scratch.numel() >= a.numel(), "scratch too small");
    auto out = torch::empty_like(a);
    ok(ops_scale(scratch.data_ptr<float>(), a.data_ptr<float>(), (float)alpha, a.numel(), stream()));
    ok(ops_axpby(out.data_ptr<float>(), scratch.data_ptr<float>(), b.data_ptr<float>(), 1.f, a.numel(), stream()));
    return out;
}
static torch::Tensor uninit_like(torch::Tensor x) { return torch::empty_like(x); }
static torch::Tensor scale(torch::Tensor x, double s) {
    check(x);
    auto out = torch::empty_like(x);
    ok(ops_scale(out.data_ptr<float>(), x.data_ptr<float>(), (float)s, x.numel(), stream()));
    return out;
}
static torch::Tensor fill_like(torch::Tensor x, double value) {
    auto out = torch::empty_like(x);
    ok(ops_fill(out.data_ptr<float>(), (float)value, out.numel(), stream()));
    return out;
}
static torch::Tensor row_mean_strided(torch::Tensor x, int64_t stride) {
    check(x);
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    auto out = torch::empty({rows}, x.options());
    ok(ops_row_mean_strided(out.data_ptr<float>(), x.data_ptr<float>(), rows, cols, stride, stream()));
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
