"""The token scan of kernel sources: rules fire on code, not on comments or strings, with the right line."""

import pytest

from cudagent.evaluator.audit.kernel_scan import scan_cpp, strip_comments_and_strings

LEGIT = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>
#include <omp.h>
#include "../binding_registry.h"
// torch::matmul would be wrong here; std::thread too. at::native::add. getenv("X")
/* static std::unordered_map<float*, int> cache; */
static float* workspace = nullptr;  // a preallocated workspace is fine
torch::Tensor f(torch::Tensor x) {
    const c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty_like(x);
    auto z = torch::zeros({x.size(0)}, torch::TensorOptions().dtype(torch::kFloat32).device(x.device()));
    auto s = c10::cuda::getCurrentCUDAStream().stream();
    auto h = at::cuda::getCurrentCUDABlasHandle();
    const char* msg = "torch::matmul in a string is fine";
    TORCH_CHECK(x.is_cuda(), "expected CUDA: std::thread");
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] {});
    at::parallel_for(0, 10, 1, [&](int64_t b, int64_t e) {});
    int exit_code = 0, on_exit = (exit_code, 1);  // names that merely contain exit
    return y;
}
"""

RULES = {
    "auto y = torch::matmul(a, b);": "KERNEL_TORCH_COMPUTE",
    "auto y = at::relu(a);": "KERNEL_TORCH_COMPUTE",
    "auto y = torch::nn::functional::gelu(a);": "KERNEL_TORCH_COMPUTE",
    "auto y = at::native::add(a, b);": "KERNEL_DISPATCH_BYPASS",
    "auto y = at::cpu::add(a, b);": "KERNEL_DISPATCH_BYPASS",
    "auto y = at::cuda::mm(a, b);": "KERNEL_DISPATCH_BYPASS",
    "c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKey::Python);": "KERNEL_DISPATCH_BYPASS",
    "cudaStream_t s; cudaStreamCreate(&s);": "KERNEL_STREAM",
    "auto s = at::cuda::getStreamFromPool();": "KERNEL_STREAM",
    "std::thread t([]{});": "KERNEL_THREAD",
    "static std::unordered_map<const float*, int> cache;": "KERNEL_STATIC_CACHE",
    "std::map<void*, torch::Tensor> m;": "KERNEL_STATIC_CACHE",
    'system("ls");': "KERNEL_PROCESS",
    "exit(0);": "KERNEL_PROCESS",
    "void (*leave)(int) = &std::exit;": "KERNEL_PROCESS",
    "auto leave = exit; leave(0);": "KERNEL_PROCESS",
    "call_later(::quick_exit, 0);": "KERNEL_PROCESS",
    'cudaGetDriverEntryPoint("cuStreamCreate", &f, cudaEnableDefault, nullptr);': "KERNEL_PROCESS",
    "c10::cuda::DriverAPI::get()->cuCtxSetCurrent_(ctx);": "KERNEL_PROCESS",
    'FILE* f = fopen("x", "r");': "KERNEL_FILE_IO",
    'const char* v = getenv("HOME");': "KERNEL_ENV",
    "cudaEventRecord(e);": "KERNEL_TIMING",
    "auto t = std::chrono::steady_clock::now();": "KERNEL_TIMING",
    "__attribute__((constructor)) static void init() {}": "KERNEL_LOAD_HOOK",
    "cudaDeviceReset();": "KERNEL_DEVICE_STATE",
    "#include <cutlass/gemm/device/gemm.h>": "KERNEL_THIRD_PARTY",
    '#include "/etc/passwd"': "KERNEL_THIRD_PARTY",
}


def test_legitimate_source_is_clean():
    assert scan_cpp(LEGIT, "kernels/k_binding.cpp") == []


@pytest.mark.parametrize("line", sorted(RULES), ids=lambda s: s[:40])
def test_rules_fire_with_file_and_line(line):
    found = scan_cpp("#include <vector>\n\n" + line + "\n", "kernels/x.cu")
    assert RULES[line] in [v.code for v in found], found
    assert any(v.message.startswith("kernels/x.cu:3:") for v in found if v.code == RULES[line])


def test_strip_keeps_line_structure():
    text = 'a // c\n"s\\"t" /* x\ny */ b\n'
    stripped = strip_comments_and_strings(text)
    assert stripped.count("\n") == text.count("\n")
    assert "c" not in stripped.split("\n")[0][1:] and "b" in stripped.split("\n")[2]
