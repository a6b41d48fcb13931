"""What the child watches while the candidate's forward runs. Runs in the untrusted child; the parent judges.

- every operator dispatched on the calling thread, through a TorchDispatchMode (OpRecorder);
- every operator dispatched on any thread, through the profiler's global callbacks (`profile_all_threads`), and
  which of them never reached the dispatch mode: an operator run on an OpenMP worker, or while the mode was popped
  or its dispatch key excluded, is recorded there and nowhere else (hidden ops);
- on CUDA, every kernel that ran and its stream, beside a marker kernel launched on the caller's stream;
- free device memory poisoned before the call, so an output that is never written holds NaN, not a stale answer;
- launch errors nobody checked (cudaGetLastError);
- which of the candidate's own compiled functions Python called (OwnCalls): on the CPU no kernel trace says that
  its own code did the work;
- the exits from torch to other compute (Tensor.numpy, __array__, DLPack, tolist, from_numpy...), closed for the
  call's length (TensorExits): a candidate could otherwise compute in NumPy, where no op recorder looks;
- the harness's own integrity: its functions, their code and its modules, compared after every request with what
  they were before any candidate code was loaded (Sentinel).

The child only records; op names are judged in the parent (op_policy.py, judge.py). One module of about 500
lines: every recorder here wraps the same call (record_call), and is read with it.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import types
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cudagent.evaluator.audit.op_policy import PASS_THROUGH_OPS, TORCH_NAMESPACES, op_allowed, split_op_name
from cudagent.trees import tensors

# The profiler's name for a call into a Python dispatch mode (ATen's Python fallback kernel).
MODE_EVENT = "PythonDispatchMode"


class OpRecorder(TorchDispatchMode):
    """Counts every op dispatched on this thread while active, including ops that C++ code dispatches.

    `handled` counts this mode's invocations; the parent compares it with the profiler's count of calls into
    dispatch modes, so a mode that stops recording is noticed.
    """

    def __init__(self, counter: Counter | None = None, calls: list | None = None):
        super().__init__()
        self.counter = counter if counter is not None else Counter()
        self.calls = calls if calls is not None else [0]

    @property
    def handled(self) -> int:
        return self.calls[0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.counter[str(func)] += 1
        self.calls[0] += 1
        if func.namespace in TORCH_NAMESPACES:
            return func(*args, **kwargs)
        # The candidate's own operator (TORCH_LIBRARY): its body is its kernel, and may dispatch ops of its own. It
        # runs below the Python key (running it through this mode again would recurse for ever) with a recorder
        # active, so that what its body dispatches is recorded too.
        with OpRecorder(self.counter, self.calls):
            return func.redispatch(_below_python(args, kwargs), *args, **kwargs)


def _below_python(args, kwargs) -> torch._C.DispatchKeySet:
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    found = False
    for t in tensors((args, kwargs)):
        keys = keys | torch._C._dispatch_keys(t) if found else torch._C._dispatch_keys(t)
        found = True
    return keys & torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)


# ----- one audited call -----------------------------------------------------------------------------------------


@dataclass
class CallRecord:
    """What one forward call did, as this process saw it."""

    result: object = None
    error: BaseException | None = None  # what forward raised, if it did
    imported: list = field(default_factory=list)  # modules first imported during the call
    ops: Counter = field(default_factory=Counter)  # op name -> count, as the dispatch mode saw them
    mode_calls: int = 0  # the dispatch mode's invocations
    mode_events: int | None = None  # calls into dispatch modes the profiler saw; None without all-thread profiling
    hidden: Counter = field(default_factory=Counter)  # "thread N: aten::op" -> count, never seen by the mode
    kernels: list | None = None  # CUDA kernels (name, stream, ns), the marker excluded
    caller_stream: int | None = None
    own_calls: Counter = field(default_factory=Counter)  # the candidate's compiled functions Python called
    exits: Counter = field(default_factory=Counter)  # closed exits to other compute the call tried

    def report(self) -> dict:
        return {
            "ops": dict(self.ops),
            "mode_calls": self.mode_calls,
            "mode_events": self.mode_events,
            "hidden_ops": dict(self.hidden),
            "imported": [m for m in self.imported if m.split(".")[0] != "torch"],
            "kernels": self.kernels,
            "caller_stream": self.caller_stream,
            "own_calls": dict(self.own_calls),
            "tensor_exits": dict(self.exits),
        }


def _all_threads_config():
    """The profiler's setting that records ops of every thread (torch >= 2.7); None where torch lacks it."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(profile_all_threads=True)
    except (ImportError, TypeError):
        return None


def record_call(fn, device: torch.device, observe_kernels: bool, own_roots: tuple[str, ...] = ()) -> CallRecord:
    """Run fn() under the op recorder and the all-thread profiler (and, if asked, CUDA kernel tracing), with the
    exits to other compute closed, counting calls into compiled modules loaded from `own_roots`."""
    from torch.profiler import ProfilerActivity, profile

    await_profiler_warmup()
    record = CallRecord()
    own = OwnCalls(own_roots, record.own_calls)
    recorder = OpRecorder(record.ops)
    config = _all_threads_config()
    activities = [ProfilerActivity.CPU] if config is not None else []
    cuda = observe_kernels and device.type == "cuda"
    if cuda:
        activities.append(ProfilerActivity.CUDA)
        marker = torch.empty(1, device=device)
        torch.cuda.synchronize()

    def run() -> None:
        modules = set(sys.modules)
        try:
            with torch.no_grad(), TensorExits(record.exits), recorder:
                sys.setprofile(own)
                try:
                    record.result = fn()
                finally:
                    sys.setprofile(None)
        except BaseException as exc:  # noqa: BLE001  (SystemExit from candidate code too: reported, not obeyed)
            record.error = exc
        record.imported = sorted(set(sys.modules) - modules)

    if not activities:
        run()
        record.mode_calls = recorder.handled
        return record
    kwargs = {"experimental_config": config} if config is not None else {}
    with profile(activities=activities, **kwargs) as prof:
        if cuda:
            marker.fill_(1.0)
        run()
        if cuda:
            try:
                torch.cuda.synchronize()
            except RuntimeError as exc:  # a sticky error: the caller's own synchronize reports it
                record.error = record.error or exc
    record.mode_calls = recorder.handled
    if config is not None:
        _find_hidden(prof.events(), record)
    if cuda:
        record.kernels, record.caller_stream = _kernels(prof)
    return record


def _find_hidden(events, record: CallRecord) -> None:
    """Ops PyTorch's dispatcher ran that never reached the dispatch mode, on any thread."""
    record.mode_events = sum(1 for e in events if e.name == MODE_EVENT)
    main = None
    roots = [e for e in events if e.cpu_parent is None]
    for e in roots:
        if e.name == MODE_EVENT or _reaches_mode(e):
            main = e.thread
            break

    def visit(e) -> None:
        if e.name == MODE_EVENT:
            return  # an op the mode recorded, and what it ran on the mode's behalf
        if "::" in e.name:
            namespace, op = split_op_name(e.name)
            if namespace in TORCH_NAMESPACES:
                if op_allowed(namespace, op):
                    return  # an allowed op; what it calls inside is its own business
                if op not in PASS_THROUGH_OPS and not _reaches_mode(e):
                    where = "the calling thread" if e.thread == main else f"thread {e.thread}"
                    record.hidden[f"{e.name} on {where}"] += 1
                    return
        for c in e.cpu_children:
            visit(c)

    for e in roots:
        visit(e)


def _reaches_mode(e) -> bool:
    return any(c.name == MODE_EVENT or _reaches_mode(c) for c in e.cpu_children)


def _kernels(prof) -> tuple[list, int | None]:
    events = []
    for e in prof.profiler.kineto_results.events():
        if e.device_type() == torch.autograd.DeviceType.CUDA:
            events.append((e.start_ns(), e.name(), int(e.device_resource_id()), int(e.duration_ns())))
    events.sort()
    if not events:
        return [], None
    caller_stream = events[0][2]  # the marker, launched first on the caller's stream
    return [{"name": n, "stream": s, "ns": d} for _, n, s, d in events[1:]], caller_stream


# ----- the profiler's warm-up -----------------------------------------------------------------------------------


_warmup: threading.Thread | None = None


def warm_profiler(cuda: bool) -> None:
    """One empty profiler session. The first session of a process costs seconds (Kineto's and CUPTI's set-up: 4-5 s
    on the H100 host, a CPU-only session as much as one with CUDA activities; about a second on a CPU-only build),
    every later one milliseconds."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    config = _all_threads_config()
    try:
        with profile(activities=activities, **({"experimental_config": config} if config else {})):
            pass
    except Exception:  # noqa: BLE001  (the real session will say what is wrong)
        pass


def start_profiler_warmup(cuda: bool) -> None:
    """Set the profiler up in the background (warm_profiler): its set-up would otherwise fall on the first trial.
    Started before any candidate code is loaded; the sessions below wait for it, and `other_threads` does not count
    it."""
    global _warmup

    _warmup = threading.Thread(target=warm_profiler, args=(cuda,), name="cudagent-profiler-warmup", daemon=True)
    _warmup.start()


def await_profiler_warmup() -> None:
    """Nothing may be timed or profiled while the warm-up's session is open."""
    if _warmup is not None:
        _warmup.join()


def other_threads() -> int:
    """Python threads running besides the main one and the harness's own warm-up."""
    return sum(1 for t in threading.enumerate() if t is not threading.main_thread() and t is not _warmup)


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


# ----- the harness's integrity ----------------------------------------------------------------------------------


class Sentinel:
    """A record of the harness taken before any candidate code runs, and the check that nothing in it changed.

    What it covers: every function and class (and their methods) of the harness's modules, by identity and code
    object, and the modules themselves in sys.modules. Candidate code that replaces any of them to forge what
    this process reports is found at the next check. (Code running in this process could in principle forge the
    check too; the static and link audits keep it from reaching the harness in the first place.)
    """

    def __init__(self, modules: list[types.ModuleType]):
        self.modules = {m.__name__: m for m in modules}
        # (module name, attribute path) -> (object, its code object or None)
        self.entries: dict[tuple[str, tuple[str, ...]], tuple[object, object]] = {}
        for m in modules:
            for name, obj in vars(m).items():
                if getattr(obj, "__module__", None) != m.__name__:
                    continue
                if isinstance(obj, types.FunctionType):
                    self.entries[(m.__name__, (name,))] = (obj, obj.__code__)
                elif isinstance(obj, type):
                    self.entries[(m.__name__, (name,))] = (obj, None)
                    for attr, member in vars(obj).items():
                        fn = _unwrap(member)
                        if isinstance(fn, types.FunctionType):
                            self.entries[(m.__name__, (name, attr))] = (fn, fn.__code__)

    def changed(self) -> list[str]:
        """Names of what differs from the record (empty when nothing does)."""
        found = [name for name, m in self.modules.items() if sys.modules.get(name) is not m]
        for (module, path), (obj, code) in self.entries.items():
            current = self.modules[module]
            for part in path:
                current = _unwrap(getattr(current, "__dict__", {}).get(part))
            if current is not obj or (code is not None and getattr(current, "__code__", None) is not code):
                found.append(".".join((module, *path)))
        return found


def _unwrap(member):
    return member.__func__ if isinstance(member, (staticmethod, classmethod)) else member


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


class OwnCalls:
    """A profile function (sys.setprofile): counts calls from Python into C functions whose code lies in a shared
    object mapped from the candidate's build directories. pybind11 is header-only, so every extension carries its
    own dispatcher: a C function's `ml_meth` points into the library that defines it, whatever name or module the
    function claims (load_inline's modules are not even in sys.modules)."""

    def __init__(self, roots: tuple[str, ...], counts: Counter):
        self.counts = counts
        self.ranges = _code_ranges(tuple(str(r) for r in roots if r))
        self._seen: dict[int, bool] = {}  # PyMethodDef address -> defined by the candidate

    def __call__(self, frame, event: str, arg) -> None:
        if event != "c_call" or not self.ranges or type(arg) is not _BUILTIN:
            return
        method_def = ctypes.c_void_p.from_address(id(arg) + _M_ML_OFFSET).value
        own = self._seen.get(method_def)
        if own is None:
            meth = ctypes.c_void_p.from_address(method_def + _ML_METH_OFFSET).value or 0
            own = self._seen[method_def] = any(lo <= meth < hi for lo, hi in self.ranges)
        if own:
            self.counts[getattr(arg, "__name__", "?")] += 1


_BUILTIN = type(len)
_M_ML_OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)  # PyCFunctionObject: PyObject_HEAD, then PyMethodDef *m_ml
_ML_METH_OFFSET = ctypes.sizeof(ctypes.c_void_p)  # PyMethodDef: const char *ml_name, then PyCFunction ml_meth


def _code_ranges(roots: tuple[str, ...]) -> list[tuple[int, int]]:
    """The executable mappings of shared objects loaded from `roots`."""
    if not roots:
        return []
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and "x" in parts[1] and parts[-1].startswith(roots):
                    lo, hi = parts[0].split("-")
                    found.append((int(lo, 16), int(hi, 16)))
    except OSError:
        pass
    return found


class TensorExits:
    """For one call, the ways out of torch to compute elsewhere (NumPy through .numpy() or __array__, any DLPack
    consumer, Python lists, buffers) raise, and each try is counted. Torch's own ops are what the op recorder judges;
    the candidate's kernels take tensors as they are."""

    def __init__(self, counts: Counter):
        self.counts = counts
        self.saved: list[tuple[object, str, object]] = []

    def _closed(self, name: str):
        counts = self.counts

        def closed(*args, **kwargs):
            counts[name] += 1
            raise RuntimeError(f"{name} is closed during forward: compute in your own kernels, not through {name}")

        return closed

    def __enter__(self) -> TensorExits:
        import torch.utils.dlpack as dlpack

        targets = [  # torch._C.TensorBase cannot change: its methods are shadowed on torch.Tensor
            (torch.Tensor, "numpy", "Tensor.numpy"),
            (torch.Tensor, "tolist", "Tensor.tolist"),
            (torch.Tensor, "__array__", "Tensor.__array__"),
            (torch.Tensor, "__dlpack__", "Tensor.__dlpack__"),
            (torch, "from_numpy", "torch.from_numpy"),
            (torch, "from_dlpack", "torch.from_dlpack"),
            (torch, "frombuffer", "torch.frombuffer"),
            (torch, "asarray", "torch.asarray"),
            (dlpack, "to_dlpack", "torch.utils.dlpack.to_dlpack"),
            (dlpack, "from_dlpack", "torch.utils.dlpack.from_dlpack"),
        ]
        for owner, attr, name in targets:
            self.saved.append((owner, attr, vars(owner).get(attr, _INHERITED)))
            setattr(owner, attr, self._closed(name))
        return self

    def __exit__(self, *exc) -> None:
        for owner, attr, original in reversed(self.saved):
            if original is _INHERITED:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)
        self.saved.clear()


_INHERITED = object()  # an attribute the class only inherited: removed again afterwards


def foreign_code(writable: tuple[str, ...]) -> list[str]:
    """Executable code this process has mapped from a file it could have written itself: under its own scratch
    (`writable`), in shared memory, a memfd, or a file since deleted. Such code was never built by the trusted
    build nor read by the link audit (a library copied or compiled at run time, then loaded)."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) < 6 or "x" not in parts[1]:
                    continue
                path = parts[5].strip()
                foreign = (
                    path.startswith(("/memfd:", "/dev/shm/"))
                    or path.endswith("(deleted)")
                    or any(path.startswith(w.rstrip("/") + "/") for w in writable)
                )
                if foreign and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


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
