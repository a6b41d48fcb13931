"""What a candidate's compiled extension links against, judged by the trusted parent before any of it is loaded.

A source scan reads what the code says; the linker says what it does. Whatever spelling the source uses
(`using namespace at;`, a hand-written `extern "C"` declaration of a BLAS routine libtorch happens to export, a
macro), every function the extension takes from another library is an undefined symbol of its shared object, and
each must belong to the API a kernel may use:

- the C++ runtime and the C library's memory, string, math and printing functions;
- pybind11 and torch's tensor caster (the module glue every extension has), and of the Python C API only what
  the baseline binding (functions taking and giving tensors, lists, tuples, optionals, numbers, strings) links
  against: a symbol beyond it (`PyRun_*`, `PyImport_*`, `PyMemoryView_*`) is KERNEL_EMBEDS_PYTHON. Calls of the
  baseline's own Python symbols from the candidate's code are the preprocessed scan's to find
  (expanded_scan.py), and the runtime audit's;
- c10 and ATen for allocation, tensor metadata, errors, devices and streams (not c10's table of driver functions,
  `c10::cuda::DriverAPI`), and `at::_ops::<op>::call` exactly for the operators the runtime policy allows
  (op_policy.py), `torch::Library` for registering operators;
- the CUDA runtime (not its stream, event, graph, IPC or device-reset calls, nor its lookups of driver functions by
  name, `cudaGetDriverEntryPoint*`: behind those, the driver's whole API), cuBLAS, cuBLASLt, cuDNN, OpenMP.

Symbols that the allowed headers and the fixed infrastructure themselves bring in are allowed whatever they are:
they are read once per toolchain from a baseline extension built from binding.cpp and a kernel that only includes
the usual headers (`baseline_symbols`; on CUDA builds this includes file and locale functions of the statically
linked runtime pieces, and the exit() that nvcc's host-side stand-in for every non-inline `__device__` function
calls, which only the source scan can then judge). Everything else is a violation named for its
real reason (ATen compute, a dispatcher bypass, BLAS, threads, files, environment, processes, timers) or, when no
reason fits, KERNEL_FORBIDDEN_SYMBOL. The same pass reads the functions the extension defines, which the runtime
audit's "your own kernel ran" check compares kernel names with.

It stays one module (over 400 lines): the allow-list, its calibration build and the audit that reads it must
change together; most of the length is the allow-list itself.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cudagent.errors import EnvironmentProblem
from cudagent.evaluator.audit.op_policy import ALLOWED_OPS, PASS_THROUGH_OPS
from cudagent.evaluator.verdict import Violation


@dataclass(frozen=True)
class LinkedLibrary:
    path: str
    defined: frozenset[str]  # base names of the functions it defines (its kernels' host stubs included)
    undefined: tuple[str, ...]  # demangled names of what it takes from other libraries


def inspect_library(path: Path) -> LinkedLibrary:
    """Read a shared object's symbols with binutils' nm (it comes with every C++ compiler)."""
    nm = shutil.which("nm")
    if not nm:
        raise EnvironmentProblem(
            "nm (binutils) was not found; it is needed to audit compiled extensions: install binutils"
        )
    defined: set[str] = set()
    for line in _nm(nm, ["-C", "--defined-only"], path).splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1] in "TtWw":
            defined.add(kernel_base_name(parts[2].split(" [clone")[0]))
    undefined = []
    for line in _nm(nm, ["-D", "-C", "--undefined-only"], path).splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and parts[0] in ("U", "w", "v"):
            undefined.append(parts[1].split("@")[0].strip())
    return LinkedLibrary(str(path), frozenset(defined), tuple(sorted(set(undefined))))


def _nm(nm: str, flags: list[str], path: Path) -> str:
    try:
        proc = subprocess.run([nm, *flags, str(path)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise EnvironmentProblem(f"nm could not read {path}: {exc}") from exc
    if proc.returncode != 0:
        raise EnvironmentProblem(f"nm could not read {path}: {proc.stderr.strip()[:300]}")
    return proc.stdout


def audit_library(lib: LinkedLibrary, where: str, baseline: frozenset[str] = frozenset()) -> list[Violation]:
    """One violation per reason, naming up to a few of the symbols behind it; `baseline` symbols are allowed."""
    by_code: dict[str, tuple[str, list[str]]] = {}
    for symbol in lib.undefined:
        if symbol in baseline:
            continue
        found = judge_symbol(symbol)
        if found:
            code, advice = found
            by_code.setdefault(code, (advice, []))[1].append(symbol)
    out = []
    for code, (advice, symbols) in by_code.items():
        named = ", ".join(f"`{_short(s)}`" for s in symbols[:4]) + (
            f" and {len(symbols) - 4} more" if len(symbols) > 4 else ""
        )
        out.append(Violation(code, f"{where} links against {named}: {advice}"))
    return out


def _short(symbol: str, limit: int = 100) -> str:
    return symbol if len(symbol) <= limit else symbol[: limit - 3] + "..."


# ----- the rules -----------------------------------------------------------------------------------------------

_SPECIAL = re.compile(r"^(?:vtable|typeinfo name|typeinfo|VTT|construction vtable|guard variable) for ")
_LIBM = re.compile(
    r"^(?:a?(?:sin|cos|tan)h?|atan2|exp(?:2|10|m1)?|log(?:2|10|1p|b)?|sqrt|cbrt|pow|erfc?|fabs|floor|ceil|l?l?round|"
    r"trunc|fmod|fmin|fmax|fma|hypot|ldexp|frexp|modf|nearbyint|l?l?rint|tgamma|lgamma|copysign|nan|remainder|"
    r"sincos|scalbl?n|ilogb|nextafter|fdim|remquo)[fl]?$"
)
_ALLOWED_C = frozenset(
    "memcpy memmove memset memcmp memchr strlen strnlen strcmp strncmp strchr strrchr strstr strdup strndup strcpy "
    "strncpy strcat strtol strtoll strtoul strtoull strtod strtof malloc calloc realloc free posix_memalign "
    "aligned_alloc printf fprintf vprintf vfprintf puts putchar fputc fputs fwrite fflush snprintf vsnprintf sprintf "
    "vsprintf __printf_chk __fprintf_chk __sprintf_chk __snprintf_chk __vsnprintf_chk __vfprintf_chk __memcpy_chk "
    "__memset_chk __memmove_chk __strcpy_chk __strcat_chk stdout stderr __stack_chk_fail __assert_fail abort "
    "__errno_location __tls_get_addr __libc_single_threaded __gmon_start__ __dso_handle __dynamic_cast "
    "__gxx_personality_v0 pthread_mutex_lock pthread_mutex_unlock pthread_mutex_trylock pthread_once "
    "pthread_self pthread_key_create pthread_getspecific pthread_setspecific pthread_cond_wait "
    "pthread_cond_broadcast pthread_cond_signal sched_yield qsort bsearch abs labs llabs isnan isinf".split()
)
_ALLOWED_C_PREFIX = re.compile(
    r"^(?:__cxa_|_Unwind_|_ITM_|__cuda|__fatbinwrap|__nv_|cublas|cudnn|omp_|GOMP_|__kmpc_|__isoc99_)"
)
# CUDA runtime calls that are not allowed, by reason; every other cuda* call is.
_CUDA_DENIED: list[tuple[re.Pattern, str]] = [
    (
        re.compile(
            r"^cuda(?:Stream(?:Create|Destroy|BeginCapture|EndCapture|AddCallback)|LaunchHostFunc|"
            r"ThreadExchangeStreamCaptureMode)"
        ),
        "KERNEL_STREAM",
    ),
    # cudaEvent* is not here: c10's CUDA guard implementation (used by every CUDAGuard) references the event API,
    # so every CUDA extension links against it; the source scan and the clock checks judge events instead.
    (re.compile(r"^cuda(?:Graph|Profiler|StreamBeginCapture)"), "KERNEL_TIMING"),
    # the driver's functions by name, any of them (cuStreamCreate, cuCtxResetPersistingL2Cache, ...): what dlsym is
    # to a library, these are to the driver, and every denial above would stand open behind them
    (re.compile(r"^cuda(?:GetDriverEntryPoint|GetExportTable)"), "KERNEL_PROCESS"),
    (
        re.compile(
            r"^cuda(?:Ipc|DeviceReset|SetDevice(?:Flags)?$|DeviceSet|CtxResetPersistingL2Cache|SetValidDevices)"
        ),
        "KERNEL_DEVICE_STATE",
    ),
]
_C_DENIED: list[tuple[re.Pattern, str]] = [
    (
        re.compile(
            r"^(?:cblas_|mkl_|MKL_|LAPACKE_|openblas_|dnnl_|[sdcz](?:gemm|gemv|axpy|dot[uc]?|scal|copy|swap|"
            r"nrm2|asum|trsm|trmm|syrk|symm|ger|gemm3m|gemmt)(?:_64)?_?$)"
        ),
        "KERNEL_THIRD_PARTY",
    ),
    # the Python C API beyond what the baseline binding takes (its argument and result conversions, the module's
    # init): running code, importing, building objects over memory
    (re.compile(r"^(?:_?Py|THP)"), "KERNEL_EMBEDS_PYTHON"),
    (re.compile(r"^(?:pthread_create|clone3?|thrd_create|pthread_detach)$"), "KERNEL_THREAD"),
    (
        re.compile(
            r"^(?:f?open(?:64)?|fclose|openat(?:64)?|creat(?:64)?|fdopen|freopen(?:64)?|unlink(?:at)?|rename(?:at)?|"
            r"remove|mmap(?:64)?|mprotect|read|write|pread(?:64)?|pwrite(?:64)?|fread|fgets|fscanf|stat|lstat|"
            r"fstat|access|opendir|readdir|readlink|truncate|ftruncate|dup2?|pipe)$"
        ),
        "KERNEL_FILE_IO",
    ),
    (re.compile(r"^(?:(?:secure_)?getenv|setenv|putenv|unsetenv|clearenv|environ|__environ)$"), "KERNEL_ENV"),
    (
        re.compile(
            r"^(?:system|popen|v?fork|exec[lv]p?e?|execvpe|posix_spawnp?|dl(?:open|sym|mopen|vsym)|kill|"
            r"exit|_exit|_Exit|quick_exit|ptrace|prctl|process_vm_(?:readv|writev)|syscall|signal|sigaction|"
            r"raise|setuid|setgid|chdir|socket|connect|cuGetProcAddress(?:_v2)?)$"
        ),
        "KERNEL_PROCESS",
    ),
    (
        re.compile(r"^(?:clock_gettime|gettimeofday|clock|time|times|getrusage|nanosleep|usleep|sleep)$"),
        "KERNEL_TIMING",
    ),
]
_ADVICE = {
    "KERNEL_TORCH_COMPUTE": "the extension computes with PyTorch; only allocation, tensor metadata and your own "
    "kernels may run (cuBLAS for GEMM and cuDNN for convolutions are allowed)",
    "KERNEL_DISPATCH_BYPASS": "calls ATen below the dispatcher or changes dispatch state; write the computation as "
    "your own kernel",
    "KERNEL_THIRD_PARTY": "a BLAS or other library routine; only CUDA, cuBLAS, cuDNN and torch's allocation API "
    "may be called",
    "KERNEL_THREAD": "threads are not allowed; parallelize inside kernels (OpenMP pragmas are fine on the CPU)",
    "KERNEL_FILE_IO": "files may not be read or written",
    "KERNEL_ENV": "environment variables may not be read or changed",
    "KERNEL_PROCESS": "processes, signals, exiting and dynamic loading (dlsym, the CUDA driver's entry points) are not "
    "allowed",
    "KERNEL_TIMING": "the extension may not read timers, record events or capture graphs",
    "KERNEL_STREAM": "launch every kernel on the caller's stream: c10::cuda::getCurrentCUDAStream()",
    "KERNEL_DEVICE_STATE": "the device's state may not be reset or reconfigured, and other processes' memory may "
    "not be opened",
    "KERNEL_EMBEDS_PYTHON": "the Python C API beyond what binding functions with m.def needs; an extension may "
    "not call into Python: compute in kernels",
    "KERNEL_FORBIDDEN_SYMBOL": "outside the API an extension may use (allocation and metadata from c10/ATen, the "
    "C and C++ runtimes, CUDA, cuBLAS, cuDNN, OpenMP)",
}

_STD_DENIED: list[tuple[re.Pattern, str]] = [
    (re.compile(r"^std::(?:thread|jthread|async|__future_base)\b"), "KERNEL_THREAD"),
    (re.compile(r"^std::(?:chrono::.*::now|this_thread::sleep)"), "KERNEL_TIMING"),
    (
        re.compile(r"^std::(?:filesystem|basic_filebuf|basic_[io]?fstream|__basic_file|__cxx11::basic_[io]?fstream)\b"),
        "KERNEL_FILE_IO",
    ),
]
_C10_DENIED = re.compile(
    r"^c10::(?:Dispatcher|OperatorHandle|TypedOperatorHandle|impl::(?:OperatorEntry|TorchDispatchModeTLS|"
    r"PythonDispatcherTLS|PythonTorchFunctionTLS|tls_|IncludeDispatchKeyGuard|ForceDispatchKeyGuard|"
    r"_force_tls_local_dispatch_key_set)|ThreadPool|TaskThreadPool)"
)
# torch's own table of driver functions (c10/cuda/driver_api.h: libcuda opened and its functions found by name, among
# them streams of green contexts, context switches, memory shared with other processes, NVML's process list): the
# driver's entry points again, behind a C++ name
_C10_DRIVER = re.compile(r"^c10::cuda::DriverAPI(?:::|$)")
_AT_ALLOWED = re.compile(
    r"^at::(?:TensorBase|Tensor|internal|TensorOptions|OptionalTensorRef|TensorRef|"
    r"get_num_threads|get_thread_num|in_parallel_region|init_num_threads|globalContext|"
    r"Context::(?!set)\w+|detail::getCUDAHooks|cuda::(?:getCurrentCUDAStream|getDefaultCUDAStream|"
    r"getCurrentCUDABlasHandle|getCurrentCUDABlasLtHandle|getCUDABlasLtWorkspace\w*|getCurrentDeviceProperties|"
    r"getDeviceProperties|warp_size|device_count|current_device))(?:::|$)"
)
_AT_BYPASS = re.compile(
    r"^at::(?:native|cpu|cuda|meta|redispatch|compositeexplicitautograd\w*|compositeimplicitautograd\w*|"
    r"impl|_ops::\w+::redispatch)\b"
)
_TORCH_ALLOWED = re.compile(
    r"^torch::(?:Library|CppFunction|detail::(?:TorchLibraryInit|class_base)|autograd::AutogradMeta|"
    r"PyWarningHandler|translate_exception_to_python|jit::parseSchema\w*)(?:::|$)"
)


def judge_symbol(symbol: str) -> tuple[str, str] | None:
    """None if the extension may take `symbol` (demangled) from another library, else (code, advice).

    >>> judge_symbol("at::_ops::empty_like::call(at::Tensor const&)") is None
    True
    >>> judge_symbol("at::_ops::mul_Scalar::call(at::Tensor const&, c10::Scalar const&)")[0]
    'KERNEL_TORCH_COMPUTE'
    >>> judge_symbol("at::native::add(at::Tensor const&)")[0], judge_symbol("cblas_saxpy")[0]
    ('KERNEL_DISPATCH_BYPASS', 'KERNEL_THIRD_PARTY')
    >>> judge_symbol("float* at::TensorBase::data_ptr<float>() const") is None, judge_symbol("expf") is None
    (True, True)
    >>> judge_symbol("std::thread::detach()")[0], judge_symbol("cudaStreamCreate")[0], judge_symbol("getenv")[0]
    ('KERNEL_THREAD', 'KERNEL_STREAM', 'KERNEL_ENV')
    >>> judge_symbol("cudaGetDriverEntryPoint")[0], judge_symbol("cudaGetDriverEntryPointByVersion")[0]
    ('KERNEL_PROCESS', 'KERNEL_PROCESS')
    >>> judge_symbol("c10::cuda::DriverAPI::get()")[0], judge_symbol("c10::cuda::getCurrentCUDAStream(signed char)")
    ('KERNEL_PROCESS', None)
    """
    special = _SPECIAL.match(symbol)
    if special:
        symbol = symbol[special.end() :]
        if "::" not in symbol:
            return None  # type information of a fundamental type (`typeinfo for bool`)
    name = qualified_name(symbol)
    if "::" not in name:
        return _judge_c(name)
    code = _judge_cpp(name)
    return (code, _ADVICE[code]) if code else None


def _judge_c(name: str) -> tuple[str, str] | None:
    if name.startswith("operator "):
        return None
    if name.startswith("cuda"):
        for pattern, code in _CUDA_DENIED:
            if pattern.search(name):
                return code, _ADVICE[code]
        return None
    if name in _ALLOWED_C or _LIBM.match(name) or _ALLOWED_C_PREFIX.match(name):
        return None
    for pattern, code in _C_DENIED:
        if pattern.match(name):
            return code, _ADVICE[code]
    return "KERNEL_FORBIDDEN_SYMBOL", _ADVICE["KERNEL_FORBIDDEN_SYMBOL"]


def _judge_cpp(name: str) -> str | None:
    root = name.split("::", 1)[0]
    if root == "std":
        for pattern, code in _STD_DENIED:
            if pattern.search(name):
                return code
        return None
    if root in ("__cxxabiv1", "__gnu_cxx", "pybind11", "caffe2"):
        return None
    if root == "c10":
        if _C10_DRIVER.match(name):
            return "KERNEL_PROCESS"
        return "KERNEL_DISPATCH_BYPASS" if _C10_DENIED.match(name) else None
    if root == "at":
        ops = re.match(r"^at::_ops::(\w+)::call$", name)
        if ops:
            return None if _op_struct_allowed(ops.group(1)) else "KERNEL_TORCH_COMPUTE"
        if _AT_ALLOWED.match(name):
            return None
        return "KERNEL_DISPATCH_BYPASS" if _AT_BYPASS.match(name) else "KERNEL_TORCH_COMPUTE"
    if root == "torch":
        return None if _TORCH_ALLOWED.match(name) else "KERNEL_TORCH_COMPUTE"
    return "KERNEL_FORBIDDEN_SYMBOL"


@functools.cache
def _op_struct_allowed(struct: str) -> bool:
    """`at::_ops::<op>_<overload>` names an allowed op: `empty_memory_format` yes, `select_scatter` no.

    >>> _op_struct_allowed("empty_memory_format"), _op_struct_allowed("fill__Scalar"), _op_struct_allowed("view")
    (True, True, True)
    >>> _op_struct_allowed("select_scatter"), _op_struct_allowed("add_Tensor")
    (False, False)
    """
    allowed = ALLOWED_OPS | PASS_THROUGH_OPS  # a pass-through op's real work is judged at run time
    if struct in allowed:
        return True
    import torch

    for i, ch in enumerate(struct):
        if ch != "_" or i == 0:
            continue
        op, overload = struct[:i], struct[i + 1 :]
        if op in allowed and overload:
            packet = getattr(torch.ops.aten, op, None)
            if packet is not None and overload in packet.overloads():
                return True
    return False


_ANON = re.compile(r"\(anonymous namespace\)::")


def kernel_base_name(demangled: str) -> str:
    """The bare function name of a demangled symbol or kernel name (how kernels and symbols are matched).

    >>> kernel_base_name("void axpby_kernel<128>(float*, float const*, int)")
    'axpby_kernel'
    >>> kernel_base_name("my::ns::fused(float*)")
    'fused'
    """
    return qualified_name(_ANON.sub("", demangled)).split("::")[-1]


def qualified_name(demangled: str) -> str:
    """The qualified function or object name of a demangled symbol, without return type, arguments or templates.

    >>> qualified_name("float* at::TensorBase::data_ptr<float>() const")
    'at::TensorBase::data_ptr'
    >>> qualified_name("std::basic_ostream<char, std::char_traits<char> >& std::__ostream_insert<char>(int)")
    'std::__ostream_insert'
    >>> qualified_name("operator new(unsigned long)"), qualified_name("memcpy")
    ('operator new', 'memcpy')
    """
    s = demangled.strip()
    if s.startswith("operator "):
        return s.split("(")[0].strip()
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = s[:cut].strip()
    # the last space at template depth 0 separates a return type from the name
    depth, start = 0, 0
    for i, ch in enumerate(head):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == " " and depth == 0:
            start = i + 1
    name = head[start:]
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


# ----- the baseline: what the allowed headers and the fixed files bring in -------------------------------------

_BASELINE_CPP = """// What every extension may link against: the fixed files and the usual headers, nothing of its own.
#include <torch/extension.h>
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/Parallel.h>
%(cuda_includes)s
#include "../binding_registry.h"

%(cuda_declarations)s
static torch::Tensor baseline_op(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous float32 input expected");
    auto out = torch::empty_like(x);
    auto wide = torch::empty({x.size(0), 2}, x.options());
    %(body)s
    return out;
}

// What a binding may take and give (pybind11's and torch's conversions): lists, tuples, optionals, numbers,
// strings, defaults, a released GIL, torch's error translation as load_inline binds. Python symbols beyond what
// these need are refused by the link audit.
static std::tuple<torch::Tensor, torch::Tensor> baseline_pair(torch::Tensor x, std::optional<torch::Tensor> y) {
    return {x, y.has_value() ? *y : x};
}
static std::vector<torch::Tensor> baseline_list(const std::vector<torch::Tensor>& xs, std::vector<int64_t> sizes,
                                                double scale, int64_t n, bool flag, std::string mode,
                                                std::optional<int64_t> dim, c10::optional<double> eps,
                                                at::IntArrayRef shape, c10::ScalarType dtype) {
    TORCH_CHECK(flag || !mode.empty() || scale > 0 || n > 0 || !sizes.empty() || dim || eps || shape.size() ||
                    dtype == at::kFloat, "unused");
    return xs;
}

static void register_ops(pybind11::module& m) {
    m.def("baseline_op", &baseline_op, py::arg("x"));
    m.def("baseline_pair", &baseline_pair, "doc", py::arg("x"), py::arg("y") = py::none(),
          py::call_guard<py::gil_scoped_release>());
    m.def("baseline_list", &baseline_list);
    m.def("baseline_wrapped", torch::wrap_pybind_function(baseline_op), "as load_inline binds");
}

REGISTER_BINDING(baseline_ops, register_ops);
"""
_BASELINE_CUDA_INCLUDES = """#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>"""
_BASELINE_CPU_BODY = """at::parallel_for(0, x.numel(), 1024, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out.data_ptr<float>()[i] = x.data_ptr<float>()[i];
    });"""
_BASELINE_CUDA_BODY = """const c10::cuda::CUDAGuard guard(x.device());
    const c10::cuda::OptionalCUDAGuard optional_guard(device_of(x));
    auto stream = c10::cuda::getCurrentCUDAStream();
    cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
    TORCH_CHECK(cublasSetStream(handle, stream.stream()) == CUBLAS_STATUS_SUCCESS, "cublas");
    TORCH_CHECK(at::cuda::getCurrentDeviceProperties()->warpSize == 32, "warp");
    cudaError_t e = baseline_launch(out.data_ptr<float>(), x.data_ptr<float>(), (int)x.numel(), stream.stream());
    TORCH_CHECK(e == cudaSuccess, "launch failed: ", cudaGetErrorString(e));"""
_BASELINE_CU = """#include <torch/types.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cstdint>

// an ordinary __device__ helper (external linkage): nvcc gives it a host-side stand-in whose body calls exit()
__device__ float baseline_copy(float v) { return v; }

__global__ void baseline_kernel(float* o, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = baseline_copy(x[i]);
}

extern "C" cudaError_t baseline_launch(float* o, const float* x, int n, cudaStream_t s) {
    baseline_kernel<<<(n + 255) / 256, 256, 0, s>>>(o, x, n);
    return cudaGetLastError();
}

torch::Tensor baseline_cuda(torch::Tensor x) {
    const c10::cuda::CUDAGuard guard(x.device());
    auto out = torch::empty_like(x);
    baseline_launch(out.data_ptr<float>(), x.data_ptr<float>(), (int)x.numel(),
                    c10::cuda::getCurrentCUDAStream().stream());
    return out;
}
"""


def baseline_symbols(device) -> frozenset[str]:
    """The undefined symbols of a baseline extension built with this device's toolchain; cached per toolchain."""
    import hashlib
    import json

    from cudagent.evaluator.toolchain.extension import build_workspace, toolchain_for
    from cudagent.resources import cached_names
    from cudagent.workspace import Workspace, infrastructure

    tc = toolchain_for(device)
    cpp = _BASELINE_CPP % {
        "cuda_includes": _BASELINE_CUDA_INCLUDES if tc.cuda else "",
        "cuda_declarations": 'extern "C" cudaError_t baseline_launch(float*, const float*, int, cudaStream_t);'
        if tc.cuda
        else "",
        "body": _BASELINE_CUDA_BODY if tc.cuda else _BASELINE_CPU_BODY,
    }
    key_text = json.dumps([device.cache_key(), tc.cxx, tc.nvcc, tc.arch, cpp, _BASELINE_CU, infrastructure()])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:20]

    def make(scratch: Path) -> tuple[str, ...]:
        ws = Workspace.create(scratch / "ws", "")
        (ws.kernels_dir / "baseline.cpp").write_text(cpp)
        if tc.cuda:
            (ws.kernels_dir / "baseline.cu").write_text(_BASELINE_CU)
        result = build_workspace(ws, device)
        if not result.ok:
            raise EnvironmentProblem(
                "the baseline extension that calibrates the link audit did not build; the toolchain is broken:\n"
                + result.errors[:2000]
            )
        return inspect_library(result.library).undefined

    return cached_names("link-baseline", key, make)
