"""What the child watches while the candidate's forward runs. Runs in the untrusted child.

- every aten op dispatched (from Python or from C++), through a TorchDispatchMode;
- on CUDA, every kernel that ran and its stream, through the profiler (CUPTI), beside a marker kernel launched on
  the caller's stream;
- free device memory poisoned before the call, so an output that is never written holds NaN, not a stale answer;
- launch errors nobody checked (cudaGetLastError).

The child reports observations; the parent judges them (see `judge.py`).
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import threading
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Ops that only allocate or initialize fresh memory, give views, or read metadata. Anything else computes.
ALLOCATION_OPS = frozenset(
    "empty empty_like empty_strided empty_permuted new_empty new_empty_strided zeros zeros_like new_zeros ones "
    "ones_like new_ones full full_like new_full fill fill_ zero_ resize_ lift_fresh lift_fresh_copy "
    "scalar_tensor".split()
)
VIEW_OPS = frozenset(
    "view _unsafe_view _reshape_alias as_strided detach alias t transpose permute expand expand_as squeeze unsqueeze "
    "select slice narrow split split_with_sizes chunk unbind unfold diagonal view_as view_as_real view_as_complex "
    "real imag movedim flatten unflatten".split()
)
METADATA_OPS = frozenset(
    "sym_size sym_stride sym_numel sym_storage_offset size stride numel dim is_contiguous is_same_size record_stream "
    "_has_compatible_shallow_copy_type".split()
)
TORCH_NAMESPACES = frozenset({"aten", "prims", "quantized", "_quantized", "rngprims", "inductor", "torchvision"})


def op_allowed(func) -> bool:
    name = func.overloadpacket.__name__
    return name in ALLOCATION_OPS or name in VIEW_OPS or name in METADATA_OPS or bool(getattr(func, "is_view", False))


class OpRecorder(TorchDispatchMode):
    """Counts every op dispatched while active, including ops that C++ code dispatches.

    A mode is switched off while its handler runs, so ops nested inside a custom (non-aten) op would go unseen;
    the handler therefore runs such ops under a fresh recorder sharing the same counter.
    """

    def __init__(self, counter: Counter | None = None):
        super().__init__()
        self.counter = counter if counter is not None else Counter()
        self.disallowed: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        self.counter[name] += 1
        if func.namespace in TORCH_NAMESPACES:
            if not op_allowed(func):
                self.disallowed[name] += 1
            return func(*args, **kwargs)
        nested = OpRecorder(self.counter)
        nested.disallowed = self.disallowed
        with nested:
            return func(*args, **kwargs)


# ----- kernels and streams (CUDA) ------------------------------------------------------------------------------


_warmup: threading.Thread | None = None


def start_profiler_warmup() -> None:
    """Set CUPTI up in the background: its first session costs seconds (about 5 s on an H100), which would otherwise
    fall on the first trial that records kernels. Started before any candidate code is loaded; the sessions below
    wait for it, and `other_threads` does not count it."""
    global _warmup

    def warm():
        from torch.profiler import ProfilerActivity, profile

        try:
            with profile(activities=[ProfilerActivity.CUDA]):
                pass
        except Exception:  # noqa: BLE001  (the real session will say what is wrong)
            pass

    _warmup = threading.Thread(target=warm, name="cudagent-profiler-warmup", daemon=True)
    _warmup.start()


def await_profiler_warmup() -> None:
    """Nothing may be timed or profiled while the warm-up's session is open."""
    if _warmup is not None:
        _warmup.join()


def other_threads() -> int:
    """Python threads running besides the main one and the harness's own warm-up."""
    return sum(1 for t in threading.enumerate() if t is not threading.main_thread() and t is not _warmup)


def observe_kernels(fn, device: torch.device):
    """Run fn() under the profiler; return (result, kernels, caller_stream).

    A marker kernel is launched on the current (caller's) stream first; its stream id is the caller's.
    kernels: list of dicts {name, stream, ns} for the candidate's kernels (the marker excluded), in start order.
    """
    from torch.profiler import ProfilerActivity, profile

    await_profiler_warmup()
    marker = torch.empty(1, device=device)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        marker.fill_(1.0)
        result = fn()
        torch.cuda.synchronize()
    events = []
    for e in prof.profiler.kineto_results.events():
        if e.device_type() == torch.autograd.DeviceType.CUDA:
            events.append((e.start_ns(), e.name(), int(e.device_resource_id()), int(e.duration_ns())))
    events.sort()
    if not events:
        return result, [], None
    caller_stream = events[0][2]
    kernels = [{"name": n, "stream": s, "ns": d} for _, n, s, d in events[1:]]
    return result, kernels, caller_stream


def profile_kernels(call, n: int) -> list[dict]:
    """Run call(i) for i < n under the profiler; every kernel, copy and memset on any stream, aggregated by name."""
    from torch.profiler import ProfilerActivity, profile

    await_profiler_warmup()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            call(i)
        torch.cuda.synchronize()
    table: dict[str, dict] = {}
    for e in prof.profiler.kineto_results.events():
        if e.device_type() != torch.autograd.DeviceType.CUDA:
            continue
        row = table.setdefault(e.name(), {"name": e.name(), "ns": 0, "count": 0, "streams": set()})
        row["ns"] += int(e.duration_ns())
        row["count"] += 1
        row["streams"].add(int(e.device_resource_id()))
    rows = sorted(table.values(), key=lambda r: -r["ns"])
    for r in rows:
        r["streams"] = sorted(r["streams"])
    return rows


def is_copy_or_memset(name: str) -> bool:
    return name.startswith(("Memcpy", "Memset", "memcpy", "memset"))


_ANON = re.compile(r"\(anonymous namespace\)::")


def kernel_base_name(demangled: str) -> str:
    """The bare function name of a demangled symbol or kernel name.

    >>> kernel_base_name("void axpby_kernel<128>(float*, float const*, int)")
    'axpby_kernel'
    >>> kernel_base_name("my::ns::fused(float*)")
    'fused'
    """
    s = _ANON.sub("", demangled.strip())
    if s.startswith("void "):
        s = s[5:]
    out, depth = [], 0
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    name = "".join(out).strip().split(" ")[-1]
    return name.split("::")[-1]


def own_libraries(roots: list[str]) -> list[str]:
    """Shared objects this process has mapped from the candidate's build directories."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if path.endswith(".so") and any(path.startswith(r) for r in roots) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def library_symbols(paths: list[str]) -> tuple[set[str], set[str]] | None:
    """(base names of functions the libraries define, names of symbols they import); None without `nm`."""
    nm = shutil.which("nm")
    if not nm:
        return None
    defined: set[str] = set()
    imported: set[str] = set()
    for path in paths:
        for flags, sink in ((["-C", "--defined-only"], defined), (["-D", "--undefined-only"], imported)):
            try:
                out = subprocess.run([nm, *flags, path], capture_output=True, text=True, timeout=60).stdout
            except (OSError, subprocess.SubprocessError):
                continue
            for line in out.splitlines():
                parts = line.split(None, 2)
                if len(parts) == 3 and parts[1] in "TtWw":
                    sink.add(kernel_base_name(parts[2]))
                elif len(parts) == 2 and parts[0] == "U":
                    sink.add(parts[1].split("@")[0])
    return defined, imported


# ----- memory and errors ---------------------------------------------------------------------------------------


CPU_POISON_MAX = 32 * 1024 * 1024


def poison_free_memory(nbytes_list: list[int], device: torch.device) -> None:
    """Fill blocks of the sizes the call will likely allocate with 0xFF (NaN in every float format), then free them.

    The caching allocator hands the same blocks back to the candidate's next allocations of those sizes, so an
    output that is allocated and not (fully) written reads as NaN instead of a previous, correct answer.
    """
    blocks = []
    for n in nbytes_list:
        # On the CPU, glibc unmaps blocks over its mmap threshold (at most 32 MiB) when freed, and a new allocation
        # gets fresh zero pages: poisoning those would cost time and protect nothing.
        if n > 0 and (device.type == "cuda" or n <= CPU_POISON_MAX):
            for _ in range(2):
                blocks.append(torch.empty(int(n), dtype=torch.uint8, device=device).fill_(0xFF))
    for _ in range(4):
        blocks.append(torch.empty(512 * 1024, dtype=torch.uint8, device=device).fill_(0xFF))
    if device.type == "cuda":
        torch.cuda.synchronize()
    del blocks


_cudart = None


def cuda_last_error() -> str | None:
    """The pending error of the CUDA runtime torch uses (launch failures nobody checked), cleared; None if none."""
    global _cudart
    if _cudart is None:
        path = None
        with open("/proc/self/maps") as f:
            for line in f:
                if "libcudart.so" in line:
                    path = line.split()[-1]
                    break
        if path is None:
            return None
        _cudart = ctypes.CDLL(path)
        _cudart.cudaGetLastError.restype = ctypes.c_int
        _cudart.cudaGetErrorString.restype = ctypes.c_char_p
        _cudart.cudaGetErrorString.argtypes = [ctypes.c_int]
    code = _cudart.cudaGetLastError()
    if code == 0:
        return None
    return f"{_cudart.cudaGetErrorString(code).decode()} (cudaError {code})"


def storage_span(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        s = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    if s.nbytes() == 0 or s.data_ptr() == 0:
        return None
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def overlaps(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]
