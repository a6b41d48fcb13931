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
phase a candidate could recognise and behave in. What is judged is the work done elsewhere alone: the CPU time in a
BLAS, NumPy, code with no file, other processes it started, threads the sampling did not list (born inside a batch)
and samples the kernel dropped (perf_sampler.py counts both to the nanosecond). The BLAS linked inside
libtorch_cpu.so (MKL, oneDNN, FBGEMM) is told apart from the rest of that library by its symbol table
(bundled_blas.py). libtorch's own code is not counted: every call of a batch changes its inputs and allocates its
outputs there (the harness's work, whose cost a loaded two-thread core multiplies fourfold), and ATen's computing
ops are the op recorder's to refuse. If the work done elsewhere comes to FOREIGN_SHARE_OF_WORK of the reference's
work or more (the reference's CPU time per call in those same kinds of code where it has any, as a product has in
its BLAS, else its whole work, sampled in this process the same way), another library did the work (`judge`:
WORK_NOT_OWN). The candidate's own time is not weighed at all: own "work" that pads the split (a page walk, a spin
loop) changes nothing, and there is no per-call allowance a small task's foreign work could hide under (only
MIN_SAMPLES, too little to tell). The Python interpreter and the C runtime (libc, libm, libstdc++, OpenMP's runtime)
are overhead that no kernel avoids and count on neither side; so does the process's time in the kernel (page faults
of fresh outputs, system calls).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field

from cudagent.evaluator.audit import bundled_blas
from cudagent.evaluator.audit.perf_sampler import SAMPLE_PERIOD_NS, Sampler, Unavailable

MIN_SAMPLES = 40  # foreign work of fewer samples than this (10 ms), however large its share: too little to tell
FOREIGN_SHARE_OF_WORK = 0.25  # work in code that is not the candidate's, this share of the reference's or more
REFERENCE_S = 0.25  # how long the reference's calls (and the per-call overhead's) are sampled here
KINDS = ("own", "torch", "blas", "numpy", "python", "runtime", "no file", "other")
FOREIGN = ("torch", "blas", "numpy", "no file", "other")


@dataclass
class Split:
    """CPU seconds of a stretch of forward calls, by kind of code."""

    seconds: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    unsampled_s: float = 0.0  # CPU time of the other processes the candidate's process started
    residual_s: float = 0.0  # its process's CPU time less its sampled threads': threads born inside a batch
    kernel_s: float = 0.0  # its sampled threads' time the samples did not see: the kernel (page faults, system calls)
    thread_s: float = 0.0  # its sampled threads' CPU time, to the nanosecond (their task clocks)
    lost_s: float = 0.0  # samples the kernel could not record (a ring buffer full): time nobody saw
    top: dict[str, float] = field(default_factory=dict)  # seconds by library
    calls: int = 0  # calls while sampled

    @property
    def computing_s(self) -> float:
        """The time sampled in code that computes: the candidate's own and everything foreign."""
        return self.seconds.get("own", 0.0) + self.foreign_s

    @property
    def foreign_s(self) -> float:
        return sum(self.seconds.get(k, 0.0) for k in FOREIGN) + self.unsampled_s + self.unseen_s + self.lost_s

    @property
    def unseen_s(self) -> float:
        """The CPU time of threads the sampling did not list: the residuals of every batch summed (each already less
        its readings' slack, so a batch's may be a little below zero)."""
        return max(0.0, self.residual_s)

    def add(self, other: Split) -> None:
        for k, v in other.seconds.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        for k, v in other.top.items():
            self.top[k] = self.top.get(k, 0.0) + v
        self.samples += other.samples
        self.unsampled_s += other.unsampled_s
        self.residual_s += other.residual_s
        self.kernel_s += other.kernel_s
        self.thread_s += other.thread_s
        self.lost_s += other.lost_s
        self.calls += other.calls

    def libraries(self, n: int = 5) -> list[tuple[str, float]]:
        return sorted(self.top.items(), key=lambda kv: -kv[1])[:n]

    def to_dict(self) -> dict:
        return {
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
            "samples": self.samples,
            "unsampled_s": round(self.unsampled_s, 4),
            "unseen_s": round(self.unseen_s, 4),
            "residual_s": round(self.residual_s, 4),
            "kernel_s": round(self.kernel_s, 4),
            "thread_s": round(self.thread_s, 4),
            "lost_s": round(self.lost_s, 4),
            "foreign_s": round(self.foreign_s, 4),
            "top": [[name, round(s, 4)] for name, s in self.libraries()],
            "calls": self.calls,
        }

    def describe(self) -> str:
        total = sum(self.seconds.values()) + self.unsampled_s + self.unseen_s + self.lost_s
        if total <= 0:
            return "no CPU time sampled"
        parts = [f"{k} {100 * self.seconds[k] / total:.0f}%" for k in KINDS if self.seconds.get(k)]
        if self.unsampled_s > 0:
            parts.append(f"other processes {100 * self.unsampled_s / total:.0f}%")
        if self.unseen_s > 0:
            parts.append(f"unsampled threads {100 * self.unseen_s / total:.0f}%")
        if self.lost_s > 0:
            parts.append(f"samples lost {100 * self.lost_s / total:.0f}%")
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


def split_of(sampler: Sampler, own_files: list[str], calls: int = 0) -> Split:
    """A finished Sampler's time by kind of code; `own_files`: the candidate's own libraries (its hand-in's), known
    by their device and inode (the process may see them under another path, inside its jail)."""
    own = set()
    for f in own_files:
        st = os.stat(f)
        own.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    period = SAMPLE_PERIOD_NS / 1e9
    seconds: dict[str, float] = {}
    by_file: dict[str, float] = {}
    for ip in sampler.ips:
        kind, name = _kind_of(ip, sampler.maps, own)
        seconds[kind] = seconds.get(kind, 0.0) + period
        by_file[name] = by_file.get(name, 0.0) + period
    return Split(
        seconds,
        samples=len(sampler.ips),
        unsampled_s=sampler.children_s,
        residual_s=sampler.residual_s,
        kernel_s=sampler.kernel_s,
        thread_s=sampler.thread_s,
        lost_s=sampler.lost_s,
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
        self.split.add(split_of(sampler, self.own_files, calls))


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
        split = split_of(sampler, [], n)
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
    if split.lost_s > 0:
        foreign["samples lost"] = split.lost_s
    where = ", ".join(f"{k} {1e3 * v / split.calls:.3f} ms" for k, v in sorted(foreign.items(), key=lambda x: -x[1]))
    libs = ", ".join(name for name, _ in split.libraries(3))
    return (
        f"{1e3 * elsewhere / split.calls:.3f} ms a call of forward's CPU time did work in code that is not the "
        f"candidate's ({where}; most in {libs}), against {1e3 * work.measure_s:.3f} ms for the reference's "
        f"{'own time there' if work.elsewhere_s > 0 else 'whole work'}: the work must be done by the candidate's "
        "kernels"
    )


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
