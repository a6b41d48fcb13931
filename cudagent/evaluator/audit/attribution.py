"""Where a candidate's CPU time went: the program counters of its process, sampled from the trusted side over every
batch of calls it runs, attributed to the code they were in.

    watch = Watch(pid, own_files)
    with watch.batch(n): ...             perf software-clock events on every thread of the candidate's process
    work = reference_work(...)           what the reference's calls cost this process, sampled the same way
    why = judge(watch.split, work)       foreign work against the reference's whole work

"One of the candidate's own functions was called" is not "its own code did the work": a kernel can call into
libtorch's bundled MKL through a pointer found at run time, or hand the tensors' memory to NumPy, with no symbol,
name or op for the audits to see. Its program counters cannot lie about where they were: the kernel (perf_event
with PERF_COUNT_SW_TASK_CLOCK, user space only) records them for the candidate's threads, the candidate's process
neither arms nor sees the sampling, and its memory map (read from /proc by this process) says which library each
sample fell in.

What is sampled is every batch of calls the candidate runs (parent_clock.py: the calls the evaluator times and
checks, each on contents never seen before, outputs checked at calls chosen after they returned), so there is no
phase a candidate could recognise and behave in. What is judged is the work done elsewhere alone: the CPU time in
a BLAS, NumPy, code with no file, other processes it started, and the CPU time of its threads the sampling did not
list (a thread born inside a batch: the process's CPU clock, read to the nanosecond, less the task clock of every
thread sampled); the BLAS linked inside libtorch_cpu.so (MKL, oneDNN, FBGEMM) is told apart
from the rest of that library by its symbol table (bundled_blas.py). libtorch's own code is not counted: every call of
a batch changes its inputs and allocates its outputs there (the harness's work, whose cost a loaded two-thread core
multiplies fourfold), and ATen's computing ops are the op recorder's to refuse. If that comes to
FOREIGN_SHARE_OF_WORK of the reference's work or more (the reference's CPU time per call in those same kinds of
code where it has any, as a product has in its BLAS, else its whole work, sampled in this process the same way),
another library did the work (`judge`: WORK_NOT_OWN). The candidate's own
time is not weighed at all: own "work" that pads the split (a page walk, a spin loop) changes nothing, and there is
no per-call allowance a small task's foreign work could hide under (only MIN_SAMPLES, too little to tell). The
Python interpreter and the C runtime (libc, libm, libstdc++, OpenMP's runtime) are overhead that no kernel avoids
and count on neither side; so does the process's time in the kernel (page faults of fresh outputs, system calls).

One module over 400 lines: the sampler, the split it yields and the rule that reads it change together; the symbol
table of a bundled BLAS, which they only ask, lives in bundled_blas.py.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from cudagent.evaluator.audit import bundled_blas
from cudagent.procs import cpu_seconds, process_tree

SAMPLE_PERIOD_NS = 250_000  # a sample each quarter millisecond of a thread's CPU time
MIN_SAMPLES = 40  # foreign work of fewer samples than this (10 ms), however large its share: too little to tell
FOREIGN_SHARE_OF_WORK = 0.25  # work in code that is not the candidate's, this share of the reference's or more
REFERENCE_S = 0.25  # how long the reference's calls (and the per-call overhead's) are sampled here
KINDS = ("own", "torch", "blas", "numpy", "python", "runtime", "no file", "other")
FOREIGN = ("torch", "blas", "numpy", "no file", "other")

_SYSCALL = {"x86_64": 298, "aarch64": 241}
_PAGES = 64  # data pages of each thread's ring buffer (256 KB: about 10,000 samples)
_PERF_TYPE_SOFTWARE, _PERF_COUNT_SW_TASK_CLOCK = 1, 1
_PERF_SAMPLE_IP, _PERF_SAMPLE_TID = 1, 2
_FLAG_DISABLED, _FLAG_EXCLUDE_KERNEL, _FLAG_EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6
_IOC_ENABLE, _IOC_DISABLE = 0x2400, 0x2401
_RECORD_SAMPLE = 9


class _Attr(ctypes.Structure):  # struct perf_event_attr, PERF_ATTR_SIZE_VER5
    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
        ("branch_sample_type", ctypes.c_uint64),
        ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64),
        ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16),
        ("reserved", ctypes.c_uint16),
    ]


class Unavailable(Exception):
    """This machine does not let this process sample the candidate's (perf_event_open refused)."""


@dataclass
class Split:
    """CPU seconds of a stretch of forward calls, by kind of code."""

    seconds: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    unsampled_s: float = 0.0  # CPU time of the other processes the candidate's process started
    unseen_s: float = 0.0  # CPU time of its process's threads that were not sampled (born inside the batch)
    kernel_s: float = 0.0  # its sampled threads' time the samples did not see: the kernel (page faults, system calls)
    thread_s: float = 0.0  # its sampled threads' CPU time, to the nanosecond (their task clocks)
    top: dict[str, float] = field(default_factory=dict)  # seconds by library
    calls: int = 0  # calls while sampled

    @property
    def computing_s(self) -> float:
        """The time sampled in code that computes: the candidate's own and everything foreign."""
        return self.seconds.get("own", 0.0) + self.foreign_s

    @property
    def foreign_s(self) -> float:
        return sum(self.seconds.get(k, 0.0) for k in FOREIGN) + self.unsampled_s + self.unseen_s

    def add(self, other: Split) -> None:
        for k, v in other.seconds.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        for k, v in other.top.items():
            self.top[k] = self.top.get(k, 0.0) + v
        self.samples += other.samples
        self.unsampled_s += other.unsampled_s
        self.unseen_s += other.unseen_s
        self.kernel_s += other.kernel_s
        self.thread_s += other.thread_s
        self.calls += other.calls

    def libraries(self, n: int = 5) -> list[tuple[str, float]]:
        return sorted(self.top.items(), key=lambda kv: -kv[1])[:n]

    def to_dict(self) -> dict:
        return {
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
            "samples": self.samples,
            "unsampled_s": round(self.unsampled_s, 4),
            "unseen_s": round(self.unseen_s, 4),
            "kernel_s": round(self.kernel_s, 4),
            "thread_s": round(self.thread_s, 4),
            "foreign_s": round(self.foreign_s, 4),
            "top": [[name, round(s, 4)] for name, s in self.libraries()],
            "calls": self.calls,
        }

    def describe(self) -> str:
        total = sum(self.seconds.values()) + self.unsampled_s + self.unseen_s
        if total <= 0:
            return "no CPU time sampled"
        parts = [f"{k} {100 * self.seconds[k] / total:.0f}%" for k in KINDS if self.seconds.get(k)]
        if self.unsampled_s > 0:
            parts.append(f"other processes {100 * self.unsampled_s / total:.0f}%")
        if self.unseen_s > 0:
            parts.append(f"unsampled threads {100 * self.unseen_s / total:.0f}%")
        return ", ".join(parts) + (f"; and {self.kernel_s:.3f} s in the kernel" if self.kernel_s > 0.001 else "")


@dataclass
class Work:
    """What the reference's calls cost in CPU time per call, sampled in this process: `work_s` its computing (the
    foreign kinds: libtorch, a BLAS, ...) beyond `overhead_s`, what a call that only changes its inputs and allocates
    its outputs spends there; `elsewhere_s` its time in the kinds a candidate's work must not be in (a BLAS, ...)."""

    work_s: float
    overhead_s: float
    calls: int
    elsewhere_s: float = 0.0

    @property
    def measure_s(self) -> float:
        """What the candidate's work done elsewhere is a share of: the reference's own time in those kinds where it
        has any (a product's BLAS: the part of its work a BLAS can do, which a loaded machine does not inflate as it
        does libtorch's waiting), else its whole work."""
        return self.elsewhere_s if self.elsewhere_s > 0 else self.work_s

    def to_dict(self) -> dict:
        return {
            "work_ms_per_call": round(self.work_s * 1e3, 5),
            "overhead_ms_per_call": round(self.overhead_s * 1e3, 5),
            "elsewhere_ms_per_call": round(self.elsewhere_s * 1e3, 5),
        }


class Sampler:
    """Samples the program counters of every thread of process `pid` while enabled (see the module's note), and
    counts what the sampling did not list: each sampled thread's task clock and the whole process's CPU clock are
    read to the nanosecond (a tick-counted user time drifts from the samples by more than a small task's work on a
    loaded machine), and the CPU time of the other processes it started."""

    def __init__(self, pid: int):
        self.pid = pid
        self.events: list[tuple[int, mmap.mmap]] = []
        self.ips: list[int] = []
        self.maps: list = []
        self.stopped = False
        self._before = (0, 0.0)  # (the process's CPU clock in ns, its children's CPU seconds) when enabled
        self._window_s = 0.0  # wall time between reading the clocks and enabling (or disabling) every event
        self.process_ns = self.thread_ns = 0  # while enabled: the process's CPU time, its sampled threads' (summed)
        self.children_s = 0.0

    def __enter__(self) -> Sampler:
        nr = _SYSCALL.get(platform.machine())
        if nr is None:
            raise Unavailable(f"no perf_event_open for {platform.machine()}")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        attr = _Attr(
            type=_PERF_TYPE_SOFTWARE,
            size=ctypes.sizeof(_Attr),
            config=_PERF_COUNT_SW_TASK_CLOCK,
            sample_period=SAMPLE_PERIOD_NS,
            sample_type=_PERF_SAMPLE_IP | _PERF_SAMPLE_TID,
            flags=_FLAG_DISABLED | _FLAG_EXCLUDE_KERNEL | _FLAG_EXCLUDE_HV,
        )
        try:
            for tid in sorted(int(t) for t in os.listdir(f"/proc/{self.pid}/task")):
                fd = libc.syscall(ctypes.c_long(nr), ctypes.byref(attr), tid, -1, -1, ctypes.c_ulong(0))
                if fd < 0:
                    err = ctypes.get_errno()
                    if err == 3:  # ESRCH: a thread that ended meanwhile
                        continue
                    raise Unavailable(f"perf_event_open refused ({os.strerror(err)})")
                buf = mmap.mmap(fd, (1 + _PAGES) * mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                self.events.append((fd, buf))
            t0 = time.monotonic()
            self._before = (_process_cpu_ns(self.pid), self._children_s())
        except (OSError, Unavailable):
            self._close()
            raise
        if not self.events:
            raise Unavailable("the process has no thread left to sample")
        import fcntl

        for fd, _ in self.events:
            fcntl.ioctl(fd, _IOC_ENABLE, 0)
        self._window_s = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop sampling (once; what came after is not the calls'); the samples are read on leaving."""
        import fcntl

        if self.stopped:
            return
        self.stopped = True
        t0 = time.monotonic()
        for fd, _ in self.events:
            try:
                fcntl.ioctl(fd, _IOC_DISABLE, 0)
            except OSError:
                pass
        try:
            process_ns = _process_cpu_ns(self.pid)
        except OSError:  # the process is gone: the batch failed, and nothing here is judged
            process_ns = self._before[0]
        self._window_s += time.monotonic() - t0
        self.process_ns = max(0, process_ns - self._before[0])
        self.children_s = max(0.0, self._children_s() - self._before[1])
        self.thread_ns = sum(_count(fd) for fd, _ in self.events)

    def __exit__(self, *exc) -> None:
        self.stop()
        self.ips = [ip for _, buf in self.events for ip in _samples(buf)]
        self.maps = _code_maps(self.pid)
        self._close()

    def _children_s(self) -> float:
        return cpu_seconds([p for p in process_tree(self.pid) if p != self.pid])

    def _close(self) -> None:
        for fd, buf in self.events:
            buf.close()
            os.close(fd)
        self.events = []

    def split(self, own_files: list[str], calls: int = 0) -> Split:
        """The sampled time by kind of code; `own_files`: the candidate's own libraries (its hand-in's), known by
        their device and inode (the process may see them under another path, inside its jail)."""
        own = set()
        for f in own_files:
            st = os.stat(f)
            own.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
        period = SAMPLE_PERIOD_NS / 1e9
        seconds: dict[str, float] = {}
        by_file: dict[str, float] = {}
        for ip in self.ips:
            kind, name = _kind_of(ip, self.maps, own)
            seconds[kind] = seconds.get(kind, 0.0) + period
            by_file[name] = by_file.get(name, 0.0) + period
        sampled = len(self.ips) * period
        threads = self.thread_ns / 1e9
        # a listed thread runs at most the windows' wall time between a clock's reading and its event's switch
        slack = (len(self.events) + 1) * self._window_s
        return Split(
            seconds,
            samples=len(self.ips),
            unsampled_s=self.children_s,
            unseen_s=max(0.0, self.process_ns / 1e9 - threads - slack),
            kernel_s=max(0.0, threads - sampled),
            thread_s=threads,
            top=by_file,
            calls=calls,
        )


class Watch:
    """The candidate's CPU time over every batch it runs: a Sampler opened for each batch (a thread it started
    since the last one is sampled from the next), the splits added up."""

    def __init__(self, pid: int, own_files: list[str]):
        self.pid, self.own_files = pid, own_files
        self.split = Split()
        self.failed: str | None = None

    @contextmanager
    def batch(self, calls: int):
        """Sample while a batch of `calls` calls runs; yields `stop()`, to call the moment the calls are done (the
        batch's early frame: its checks and the reading of its outputs are the evaluator's, not forward's)."""
        if self.failed is not None:
            yield lambda: None
            return
        try:
            sampler = Sampler(self.pid).__enter__()
        except Unavailable as exc:
            self.failed = str(exc)
            yield lambda: None
            return
        try:
            yield sampler.stop
        finally:
            sampler.__exit__(None, None, None)
        self.split.add(sampler.split(self.own_files, calls))


def reference_work(run_reference, run_overhead, calls_for) -> Work:
    """Sample this process while `run_reference(n)` makes n of the reference's calls, and while `run_overhead(n)`
    makes n calls that only change their inputs and allocate outputs like the reference's; `calls_for(run)` says
    how many calls take about REFERENCE_S. Raises Unavailable where sampling is refused."""
    per_call, elsewhere = {}, 0.0
    for name, run in (("reference", run_reference), ("overhead", run_overhead)):
        n = calls_for(run)
        run(min(n, 3))  # warm: the thread pools this process's calls use exist before their threads are listed
        with Sampler(os.getpid()) as sampler:
            run(n)
        split = sampler.split([], n)
        per_call[name] = sum(split.seconds.get(k, 0.0) for k in FOREIGN) / n
        if name == "reference":
            elsewhere = sum(split.seconds.get(k, 0.0) for k in FOREIGN if k != "torch") / n
    return Work(max(0.0, per_call["reference"] - per_call["overhead"]), per_call["overhead"], n, elsewhere)


def classify(path: str | None) -> str:
    """The kind of code a mapped file holds that is not the candidate's own (None: code with no file behind it, as
    a JIT or a copy in anonymous memory makes)."""
    if path is None:
        return "no file"
    name = os.path.basename(path)
    runtime = ("libc.", "libc-", "libm.", "libm-", "libstdc++", "libgcc_s", "ld-linux", "libpthread", "libdl")
    if name.startswith((*runtime, "libgomp", "libiomp", "librt", "libz.")) or name in ("[vdso]", "[vsyscall]"):
        return "runtime"  # OpenMP's runtime too, wherever it lies (torch bundles one): a kernel's threads wait in it
    if name.startswith(("libtorch", "libc10", "libshm", "libcaffe2")) or "/torch/" in path:
        return "torch"
    if name.startswith(("libmkl", "libopenblas", "libblas", "libcblas", "liblapack", "libdnnl", "libscipy_openblas")):
        return "blas"
    if "/numpy/" in path or "/numpy.libs/" in path or "/scipy/" in path:
        return "numpy"
    if name.startswith(("libpython", "python")) or "/lib-dynload/" in path:
        return "python"
    return "other"


def judge(split: Split, work: Work) -> str | None:
    """Why the candidate's work done elsewhere is the work, or None (see the module's note); None too when it is too
    little to tell. Work done elsewhere: the time in a BLAS (the one inside libtorch_cpu.so included), NumPy, code with
    no file, other processes and unsampled threads. libtorch's own code is not counted: every call changes its inputs
    and allocates its outputs there, at a cost a loaded machine multiplies (ops that compute are the op recorder's)."""
    elsewhere = split.foreign_s - split.seconds.get("torch", 0.0)
    least = max(MIN_SAMPLES * SAMPLE_PERIOD_NS / 1e9, FOREIGN_SHARE_OF_WORK * split.calls * work.measure_s)
    if elsewhere < least:
        return None
    foreign = {k: split.seconds.get(k, 0.0) for k in FOREIGN if split.seconds.get(k) and k != "torch"}
    if split.unsampled_s > 0:
        foreign["other processes"] = split.unsampled_s
    if split.unseen_s > 0:
        foreign["unsampled threads"] = split.unseen_s
    where = ", ".join(f"{k} {1e3 * v / split.calls:.3f} ms" for k, v in sorted(foreign.items(), key=lambda x: -x[1]))
    libs = ", ".join(name for name, _ in split.libraries(3))
    return (
        f"{1e3 * elsewhere / split.calls:.3f} ms a call of forward's CPU time did work in code that is not the "
        f"candidate's ({where}; most in {libs}), against {1e3 * work.measure_s:.3f} ms for the reference's "
        f"{'own time there' if work.elsewhere_s > 0 else 'whole work'}: the work must be done by the candidate's "
        "kernels"
    )


def _process_cpu_ns(pid: int) -> int:
    """The CPU time of process `pid` (every thread, ended ones included, user and kernel) in nanoseconds: its
    process CPU clock (clock_getcpuclockid's, CPUCLOCK_SCHED), which the kernel lets any process read."""
    return time.clock_gettime_ns(((~pid) << 3) | 2)


def _count(fd: int) -> int:
    """A task-clock event's count: the nanoseconds its thread ran while the event was enabled (user and kernel)."""
    try:
        data = os.read(fd, 8)
    except OSError:
        return 0
    return struct.unpack("<Q", data)[0] if len(data) == 8 else 0


def _samples(buf: mmap.mmap):
    """The instruction pointers in one ring buffer (PERF_RECORD_SAMPLE records: ip, pid, tid)."""
    head = struct.unpack_from("<Q", buf, 1024)[0]
    data_offset, data_size = struct.unpack_from("<QQ", buf, 1040)
    if not data_size:  # kernels before 4.1 have no data_offset/data_size: the data follows the first page
        data_offset, data_size = mmap.PAGESIZE, _PAGES * mmap.PAGESIZE
    start = max(0, head - data_size)  # older records were overwritten
    pos = start
    while pos + 8 <= head:
        rtype, _misc, size = _header(buf, data_offset, data_size, pos)
        if size == 0:
            break
        if rtype == _RECORD_SAMPLE and size >= 24:
            yield struct.unpack("<Q", _read(buf, data_offset, data_size, pos + 8, 8))[0]
        pos += size


def _header(buf, offset: int, size: int, pos: int) -> tuple[int, int, int]:
    return struct.unpack("<IHH", _read(buf, offset, size, pos, 8))


def _read(buf, offset: int, size: int, pos: int, n: int) -> bytes:
    i = pos % size
    if i + n <= size:
        return buf[offset + i : offset + i + n]
    return buf[offset + i : offset + size] + buf[offset : offset + (i + n - size)]


def _code_maps(pid: int) -> list[tuple[int, int, str | None, tuple, int]]:
    """The executable mappings of the process: (start, end, file or None, (device major, minor, inode), offset in
    the file)."""
    maps = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) < 5 or "x" not in parts[1]:
                    continue
                start, end = (int(x, 16) for x in parts[0].split("-"))
                major, minor = (int(x, 16) for x in parts[3].split(":"))
                path = parts[5].strip() if len(parts) == 6 else ""
                path = path if path.startswith(("/", "[v")) else None
                maps.append((start, end, path, (major, minor, int(parts[4])), int(parts[2], 16)))
    except (OSError, ValueError):
        pass
    return maps


def _kind_of(ip: int, maps, own: set) -> tuple[str, str]:
    """(kind of code, library name) of the sample at `ip`: the candidate's own, or its library's kind, except that a
    BLAS linked into a library (bundled_blas.py: MKL inside libtorch_cpu.so) is "blas"."""
    for start, end, path, identity, offset in maps:
        if start <= ip < end:
            name = os.path.basename(path) if path else "(no file)"
            if identity in own:
                return "own", name
            kind = classify(path)
            if kind == "torch" and path is not None:
                table = bundled_blas.ranges(path, identity)
                vaddr = bundled_blas.vaddr_of(table, ip - start + offset) if table else None
                if vaddr is not None and bundled_blas.contains(table, vaddr):
                    return "blas", f"{name} (its BLAS)"
            return kind, name
    return "no file", "(no file)"
