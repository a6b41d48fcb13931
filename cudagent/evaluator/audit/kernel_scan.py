"""Token scan of the candidate's C++ and CUDA sources (kernels/, and C++ strings in model_new.py).

Comments and string literals are blanked first (line numbers kept), so only code is judged. Rules name what the
agent must not do in an extension: compute with ATen, go below the dispatcher, create streams or threads, keep
static caches, run processes, touch files or the environment, read timers, hook load/exit, call into Python, reset
the device, or pull in libraries other than CUDA, cuBLAS and cuDNN. What a spelling can hide from a scan (tensor
methods such as `x.sum()`, `using namespace at;`, a hand-declared `extern "C"` routine) is caught by the link audit
of the built library (link_audit.py) and at run time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cudagent.evaluator.verdict import Violation

# at::/torch:: functions an extension may call: allocation and option/metadata helpers, load_inline's binding wrapper.
ALLOWED_FUNCS = frozenset(
    "empty empty_like empty_strided zeros zeros_like ones ones_like full full_like from_blob dtype device layout "
    "requires_grad memory_format ceil_div "
    "irange parallel_for get_num_threads elementSize toString typeMetaToScalarType numeric_limits acc_type "
    "opmath_type isFloatingType isComplexType isIntegralType isReducedFloatingType check str "
    "wrap_pybind_function".split()
)
CUDA_ALLOWED = frozenset(
    "getCurrentCUDAStream getDefaultCUDAStream getCurrentCUDABlasHandle getCurrentCUDABlasLtHandle "
    "getCurrentDeviceProperties getDeviceProperties CUDAGuard OptionalCUDAGuard CUDAStream device_count "
    "current_device warp_size ATenCeilDiv CUDACachingAllocator".split()
)
CUDA_STREAM_NAMES = frozenset(
    "getStreamFromPool getStreamFromExternal setCurrentCUDAStream CUDAStreamGuard OptionalCUDAStreamGuard "
    "CUDAMultiStreamGuard".split()
)
BYPASS_NAMESPACES = frozenset(
    "native cpu _ops redispatch compositeexplicitautograd compositeimplicitautograd meta "
    "compositeexplicitautogradnonfunctional impl".split()
)
BYPASS_NAMES = frozenset(
    "Dispatcher ExcludeDispatchKeyGuard IncludeDispatchKeyGuard AutoDispatchBelowAutograd "
    "AutoDispatchBelowADInplaceOrView AutoDispatchSkipFunctionalize tls_set_dispatch_key_excluded "
    "tls_set_dispatch_key_included DispatchKeySet TorchDispatchModeTLS PythonDispatcherTLS PythonTorchFunctionTLS "
    "ForceDispatchKeyGuard OperatorHandle TypedOperatorHandle".split()
)
COMPUTE_NAMESPACES = frozenset({"nn", "autograd", "linalg", "fft", "special", "functional"})
THIRD_PARTY_INCLUDES = (
    "cutlass",
    "cute",
    "thrust",
    "cufft",
    "cusparse",
    "cusolver",
    "curand",
    "nccl",
    "nvshmem",
    "flash",
    "xformers",
    "triton",
    "Eigen",
    "mkl",
    "cblas",
    "openblas",
    "dnnl",
    "oneapi",
    "cudnn_frontend",
    "NvInfer",
    "boost",
    "tvm",
)

_QUALIFIED = re.compile(r"\b(at|torch|c10)\s*::\s*([A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*)")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
_RULES: list[tuple[str, re.Pattern, str]] = [
    (
        "KERNEL_STREAM",
        re.compile(
            r"\b(cudaStreamCreate\w*|cudaStreamPerThread|cudaLaunchHostFunc|cudaStreamAddCallback|"
            r"cuStreamCreate\w*)\b"
        ),
        "launch every kernel on the caller's stream: c10::cuda::getCurrentCUDAStream()",
    ),
    (
        "KERNEL_THREAD",
        re.compile(r"\bstd\s*::\s*(thread|jthread|async)\b|\bpthread_create\b|#\s*include\s*<(thread|future)>"),
        "threads are not allowed; parallelize inside kernels (OpenMP pragmas are fine on the CPU)",
    ),
    (
        "KERNEL_STATIC_CACHE",
        re.compile(
            r"\bstatic\s+(?:thread_local\s+)?(?:const\s+)?(?:std\s*::\s*)?(?:unordered_map|map|unordered_set|set|multimap|"
            r"unordered_multimap|deque|list)\s*<|\bstatic\s+(?:thread_local\s+)?(?:std\s*::\s*)?vector\s*<\s*(?:at|torch)\s*::"
            r"\s*Tensor|\b(?:unordered_map|map|unordered_set|set)\s*<\s*(?:const\s+)?[\w:]*(?:\*|Tensor|uintptr_t)"
        ),
        "caches of results keyed by pointers or contents are not allowed; compute every call from its inputs",
    ),
    (
        "KERNEL_PROCESS",
        re.compile(
            r"\b(system|popen|fork|vfork|execv|execvp|execve|execl|execlp|execle|posix_spawnp?|"
            r"dlopen|dlsym|kill|exit|_exit|_Exit|quick_exit|cudaGetDriverEntryPoint\w*|cudaGetExportTable|"
            r"cuGetProcAddress\w*)\s*\(|\bDriverAPI\s*::\s*get\b"
        ),
        "processes, exiting and dynamic loading (dlsym, the CUDA driver's entry points) are not allowed",
    ),
    (  # exit named without a call (a pointer to it): on CUDA builds only this scan can see it, since link_audit.py
        # allows exit there (nvcc's host-side stand-in for every non-inline __device__ function calls it)
        "KERNEL_PROCESS",
        re.compile(r"[&=,(]\s*(?:std\s*::\s*|::\s*)?(?:exit|_exit|_Exit|quick_exit)\s*[;,)]"),
        "processes, exiting and dynamic loading are not allowed",
    ),
    (
        "KERNEL_FILE_IO",
        re.compile(
            r"\b(fopen|freopen|creat|unlink|rename|mmap|open|openat)\s*\(|\bstd\s*::\s*[io]?fstream\b|"
            r"#\s*include\s*<fstream>"
        ),
        "files may not be read or written",
    ),
    (
        "KERNEL_ENV",
        re.compile(r"\b(getenv|secure_getenv|setenv|putenv|unsetenv|clearenv)\s*\(|\benviron\b"),
        "environment variables may not be read or changed",
    ),
    (
        "KERNEL_TIMING",
        re.compile(
            r"\bcudaEvent(Create|Record|ElapsedTime|Query|Synchronize)\w*|\bclock_gettime\b|"
            r"\bgettimeofday\b|\bstd\s*::\s*chrono\b|\bcupti\w*|\bcudaProfiler(Start|Stop)\b|"
            r"%globaltimer|\b__globaltimer\b|\bnvtx\w*|\brdtsc\b"
        ),
        "the extension may not read timers or profile itself",
    ),
    (
        "KERNEL_LOAD_HOOK",
        re.compile(r"__attribute__\s*\(\(\s*(constructor|destructor)|\b(atexit|at_quick_exit)\s*\("),
        "code may not run at load or exit; register bindings with REGISTER_BINDING only",
    ),
    (
        "KERNEL_EMBEDS_PYTHON",
        re.compile(
            r"\b(?:py|pybind11)\s*::\s*(?:module_?\s*::\s*import|import|eval|exec|eval_file|globals|getattr|setattr|"
            r"hasattr|delattr|reinterpret_borrow|reinterpret_steal|cpp_function|capsule|exec_file|builtins)\b|"
            r"\.\s*(?:attr|import)\s*\(|\b_?Py[A-Z][A-Za-z]*_\w+\s*\(|\bTHP\w+\s*\("
        ),
        "an extension may not call into Python (import, eval, exec, attribute access, the Python C API); bind your "
        "functions with m.def and compute in kernels",
    ),
    (
        "KERNEL_DEVICE_STATE",
        re.compile(
            r"\bcuda(DeviceReset|SetDevice|SetDeviceFlags|DeviceSetLimit|DeviceSetCacheConfig|"
            r"DeviceSetSharedMemConfig|DeviceSetMemPool|CtxResetPersistingL2Cache)\b|"
            r"\bcu(CtxCreate|CtxDestroy|CtxSetCurrent|DevicePrimaryCtxReset)\w*"
        ),
        "the device's state may not be reset or reconfigured; use c10::cuda::CUDAGuard to pick the device",
    ),
]


def strip_comments_and_strings(text: str) -> str:
    """Blank comments and string/char literals, keeping every newline (so line numbers stay right)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and nxt == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def scan_cpp(text: str, where: str) -> list[Violation]:
    """Violations in one C++/CUDA source; `where` names it in messages (a path, or a line in model_new.py)."""
    found: list[Violation] = []
    code_text = strip_comments_and_strings(text)

    def add(code: str, pos: int, message: str) -> None:
        loc = f"{where}:{code_text.count(chr(10), 0, pos) + 1}" if ":" not in where else where
        found.append(Violation(code, f"{loc}: {message}"))

    for match in rule_matches(code_text):
        add(match.code, match.start, match.message)
    for m in _INCLUDE.finditer(text):
        problem = _judge_include(m.group(1), m.group(2))
        if problem:
            add("KERNEL_THIRD_PARTY", m.start(), problem)
    return found


@dataclass(frozen=True)
class RuleMatch:
    code: str
    start: int
    end: int
    text: str  # what matched, as written
    message: str


def rule_matches(code_text: str) -> list[RuleMatch]:
    """What the rules find in code whose comments and strings are blanked (strip_comments_and_strings): qualified
    at::/torch::/c10:: names and the token rules, in order of position. The raw source and the source after
    preprocessing (expanded_scan.py) are judged by these same rules."""
    found = []
    for m in _QUALIFIED.finditer(code_text):
        verdict = _judge_qualified(m.group(1), [p.strip() for p in m.group(2).split("::")])
        if verdict:
            text = m.group(0).replace(" ", "")
            found.append(RuleMatch(verdict[0], m.start(), m.end(), text, f"`{text}` {verdict[1]}"))
    for code, pattern, advice in _RULES:
        for m in pattern.finditer(code_text):
            text = m.group(0).strip()
            found.append(RuleMatch(code, m.start(), m.end(), text, f"`{text}`: {advice}"))
    return sorted(found, key=lambda r: r.start)


def _judge_qualified(ns: str, parts: list[str]) -> tuple[str, str] | None:
    if any(p in BYPASS_NAMES for p in parts):
        return "KERNEL_DISPATCH_BYPASS", "goes around PyTorch's dispatcher; call only your own kernels"
    first, last = parts[0], parts[-1]
    if first in BYPASS_NAMESPACES:
        return "KERNEL_DISPATCH_BYPASS", "calls ATen below the dispatcher; write the computation as your own kernel"
    if first == "cuda":
        if last in CUDA_STREAM_NAMES:
            return "KERNEL_STREAM", "switches or creates streams; launch on c10::cuda::getCurrentCUDAStream()"
        if last in CUDA_ALLOWED or _is_type_name(last) or len(parts) == 1:
            return None
        return (
            "KERNEL_DISPATCH_BYPASS",
            "calls an ATen CUDA function directly; write the computation as your own kernel",
        )
    if ns == "c10":
        return None
    if first in ("indexing", "detail"):
        return None
    if first in COMPUTE_NAMESPACES:
        return (
            "KERNEL_TORCH_COMPUTE",
            "computes with PyTorch; write the computation as a kernel (cuBLAS/cuDNN are allowed)",
        )
    if _is_type_name(last) or last in ALLOWED_FUNCS:
        return None
    return "KERNEL_TORCH_COMPUTE", (
        "computes with PyTorch inside the extension; only allocation (torch::empty*, "
        "torch::zeros*) is allowed: write the computation as a kernel (cuBLAS for GEMM and "
        "cuDNN for convolutions are allowed)"
    )


def _is_type_name(name: str) -> bool:
    return name[:1].isupper() or (len(name) > 1 and name[0] == "k" and name[1].isupper())


def _judge_include(kind: str, name: str) -> str | None:
    root = name.split("/")[0].split(".")[0]
    if any(root.lower().startswith(p.lower()) for p in THIRD_PARTY_INCLUDES):
        return f"includes <{name}>: only CUDA, cuBLAS, cuDNN, torch headers and the C++ standard library may be used"
    if name.startswith("/") or name.count("../") > 1:
        return f'includes "{name}", outside the workspace'
    return None


def scan_files(paths: list[Path], root: Path) -> list[Violation]:
    found: list[Violation] = []
    for p in paths:
        try:
            text = p.read_text(errors="replace")
        except OSError:
            continue
        found.extend(scan_cpp(text, str(p.relative_to(root))))
    return found
