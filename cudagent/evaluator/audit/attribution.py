"""Where a candidate's CPU time went, as CUPTI tells it on the GPU: the program counters of its process, sampled
from the trusted side while forward runs, attributed to the code they were in.

    with Sampler(pid) as sampler:        perf software-clock events on every thread of the candidate's process
        ... the process runs forward ...
    split = sampler.split(own_roots)     seconds of CPU time by kind of code: own, torch, blas, numpy, python, ...

"One of the candidate's own functions was called" is not "its own code did the work": a kernel can call into
libtorch's bundled MKL through a pointer found at run time, or hand the tensors' memory to NumPy, with no symbol,
name or op for the audits to see. Its program counters cannot lie about where they were: the kernel (perf_event
with PERF_COUNT_SW_TASK_CLOCK, user space only) records them for the candidate's threads, the candidate's process
neither arms nor sees the sampling, and its memory map (read from /proc by this process) says which library each
sample fell in. The rule (`judge`): most of the time forward spends computing must be in the candidate's own
libraries (its hand-in), not in libtorch, a BLAS, NumPy or code with no file; the Python interpreter and the C
runtime (libc, libm, libstdc++, OpenMP's runtime) are overhead that no kernel avoids and count on neither side.
What a call spends elsewhere must also amount to work, FOREIGN_WORK_S a call at least: the dispatcher and the
allocator of a forward's allowed metadata and allocation calls cost tens of microseconds, which on a tiny task
outweigh an honest kernel without doing any of its work (ops that compute are the op recorder's to refuse).
The CPU time of other processes it started (work handed to a helper) counts as foreign; its own time in the
kernel (page faults of fresh outputs, system calls) counts on neither side.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
from dataclasses import dataclass, field

from cudagent.procs import cpu_seconds, process_tree

SAMPLE_PERIOD_NS = 250_000  # a sample each quarter millisecond of a thread's CPU time
MIN_SAMPLES = 40  # fewer samples of computing code than this: too little to judge
OWN_SHARE_REQUIRED = 0.5  # of the time spent computing (own and foreign code)
FOREIGN_WORK_S = 200e-6  # foreign time a call must spend before it counts as doing the work, not as overhead
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
    kernel_s: float = 0.0  # its own time in the kernel: page faults, system calls (not sampled)
    top: list[tuple[str, float]] = field(default_factory=list)  # the libraries that held the most time
    calls: int = 1  # forward calls while sampled

    @property
    def computing_s(self) -> float:
        return self.seconds.get("own", 0.0) + sum(self.seconds.get(k, 0.0) for k in FOREIGN) + self.unsampled_s

    @property
    def own_share(self) -> float | None:
        return self.seconds.get("own", 0.0) / self.computing_s if self.computing_s > 0 else None

    def to_dict(self) -> dict:
        share = self.own_share
        return {
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
            "samples": self.samples,
            "unsampled_s": round(self.unsampled_s, 4),
            "kernel_s": round(self.kernel_s, 4),
            "own_share_of_computing": None if share is None else round(share, 3),
            "top": [[name, round(s, 4)] for name, s in self.top],
            "calls": self.calls,
        }

    def describe(self) -> str:
        total = sum(self.seconds.values()) + self.unsampled_s
        if total <= 0:
            return "no CPU time sampled"
        parts = [f"{k} {100 * self.seconds[k] / total:.0f}%" for k in KINDS if self.seconds.get(k)]
        if self.unsampled_s > 0:
            parts.append(f"other processes {100 * self.unsampled_s / total:.0f}%")
        return ", ".join(parts) + (f"; and {self.kernel_s:.3f} s in the kernel" if self.kernel_s > 0.001 else "")


class Sampler:
    """Samples the program counters of every thread of process `pid` while enabled (see the module's note)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.events: list[tuple[int, mmap.mmap]] = []
        self.cpu_before = (0.0, 0.0)  # (the whole tree's CPU seconds, the process's own)
        self.cpu_s = (0.0, 0.0)

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
        except (OSError, Unavailable):
            self._close()
            raise
        if not self.events:
            raise Unavailable("the process has no thread left to sample")
        import fcntl

        self.cpu_before = self._cpu()
        for fd, _ in self.events:
            fcntl.ioctl(fd, _IOC_ENABLE, 0)
        return self

    def __exit__(self, *exc) -> None:
        import fcntl

        for fd, _ in self.events:
            try:
                fcntl.ioctl(fd, _IOC_DISABLE, 0)
            except OSError:
                pass
        after = self._cpu()
        self.cpu_s = (max(0.0, after[0] - self.cpu_before[0]), max(0.0, after[1] - self.cpu_before[1]))
        self.ips = [ip for _, buf in self.events for ip in _samples(buf)]
        self.maps = _code_maps(self.pid)
        self._close()

    def _cpu(self) -> tuple[float, float]:
        return cpu_seconds(process_tree(self.pid)), cpu_seconds([self.pid])

    def _close(self) -> None:
        for fd, buf in self.events:
            buf.close()
            os.close(fd)
        self.events = []

    def split(self, own_files: list[str], calls: int = 1) -> Split:
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
            path, identity = _mapping_of(ip, self.maps)
            kind = "own" if identity in own else classify(path)
            seconds[kind] = seconds.get(kind, 0.0) + period
            name = os.path.basename(path) if path else "(no file)"
            by_file[name] = by_file.get(name, 0.0) + period
        sampled = len(self.ips) * period
        top = sorted(by_file.items(), key=lambda kv: -kv[1])[:5]
        tree, own_process = self.cpu_s
        return Split(
            seconds,
            samples=len(self.ips),
            unsampled_s=max(0.0, tree - own_process),
            kernel_s=max(0.0, own_process - sampled),
            top=top,
            calls=calls,
        )


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


def judge(split: Split) -> str | None:
    """Why the split fails the rule (most of forward's computing time in the candidate's own code), or None; None
    too when there were too few samples to tell."""
    computing_samples = split.computing_s / (SAMPLE_PERIOD_NS / 1e9)
    share = split.own_share
    if share is None or computing_samples < MIN_SAMPLES or share >= OWN_SHARE_REQUIRED:
        return None
    if (split.computing_s - split.seconds.get("own", 0.0)) / max(1, split.calls) < FOREIGN_WORK_S:
        return None  # overhead, not work (see the module's note)
    foreign = {k: split.seconds.get(k, 0.0) for k in FOREIGN if split.seconds.get(k)}
    if split.unsampled_s > 0:
        foreign["unsampled (other processes)"] = split.unsampled_s
    where = ", ".join(
        f"{k} {100 * v / split.computing_s:.0f}%" for k, v in sorted(foreign.items(), key=lambda x: -x[1])
    )
    libs = ", ".join(name for name, _ in split.top[:3])
    return (
        f"{100 * share:.0f}% of forward's computing time ran in the candidate's own code and the rest elsewhere "
        f"({where}; most in {libs}): the work must be done by the candidate's kernels"
    )


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


def _code_maps(pid: int) -> list[tuple[int, int, str | None, tuple]]:
    """The executable mappings of the process: (start, end, file or None, (device major, minor, inode))."""
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
                maps.append((start, end, path if path.startswith(("/", "[v")) else None, (major, minor, int(parts[4]))))
    except (OSError, ValueError):
        pass
    return maps


def _mapping_of(ip: int, maps) -> tuple[str | None, tuple | None]:
    for start, end, path, identity in maps:
        if start <= ip < end:
            return path, identity
    return None, None
