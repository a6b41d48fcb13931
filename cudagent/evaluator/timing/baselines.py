"""The baselines: the task's reference timed eager and under torch.compile, in a clean process.

A `ReferenceWorker` is a child process that loads only the task's text (never candidate code), so it stays clean
for as long as its Evaluator lives and can be reused for every interleaved confirmation. Each baseline gets a worker
of its own: eager and compiled code in one process disturb each other (two OpenMP users spinning on a small CPU
slowed eager ops a hundredfold after compiled code had run). Clean timings are cached
on disk per (task hash, GPU, driver, torch, compile mode, protocol): a run, or a whole machine, pays for them once.
They are measured before any candidate process exists, so nothing a candidate does can slow them.
"""

from __future__ import annotations

import fcntl
import getpass
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from cudagent.device.info import DeviceInfo
from cudagent.device.share import device_share
from cudagent.evaluator.jail.process import ChildFailure, ChildProcess
from cudagent.evaluator.timing.measure import INPUT_SETS, Plan, sets_for
from cudagent.evaluator.verdict import TimeStats
from cudagent.resources import cache_dir
from cudagent.task import Task

# Bump when the measurement changes, so timings measured the old way are not compared with new ones.
PROTOCOL_VERSION = "6"  # 6: children keep their heap (jail/process.py KEEP_HEAP)
WORKER_TIMEOUT_S = 1200.0
BREAKDOWN_ITERATIONS = 20
TARGETS = ("eager", "compile")


class BaselineError(Exception):
    """A baseline could not be measured; the message says why."""


@dataclass
class Measurement:
    """Per-sample times (`stats`, `ms`: what tiers compare; the JSON calls them `event_ms`), their device part alone
    (`device`, `device_ms`: the events' time, which the host's load does not move), and the wall-clock cross-check."""

    stats: TimeStats
    wall: TimeStats
    ms: list[float]
    device: TimeStats
    device_ms: list[float]

    @classmethod
    def of(cls, reply: dict) -> Measurement:
        device_ms = list(reply.get("device_ms", reply["ms"]))
        return cls(
            TimeStats.of(reply["ms"]),
            TimeStats.of(reply["wall_ms"]),
            list(reply["ms"]),
            TimeStats.of(device_ms),
            device_ms,
        )

    def to_dict(self, with_samples: bool = False) -> dict:
        d = {"event_ms": asdict(self.stats), "device_ms": asdict(self.device), "wall_ms": asdict(self.wall)}
        if with_samples:
            d["samples_ms"] = self.ms
            d["device_samples_ms"] = self.device_ms
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Measurement:
        return cls(
            TimeStats(**d["event_ms"]),
            TimeStats(**d["wall_ms"]),
            list(d.get("samples_ms", [])),
            TimeStats(**d.get("device_ms", d["event_ms"])),
            list(d.get("device_samples_ms", d.get("samples_ms", []))),
        )


@dataclass
class Baseline:
    measurement: Measurement
    kernels: dict | None = None  # {"iterations": n, "kernels": [{name, ns, count, streams}]} on CUDA

    @property
    def compared_ms(self) -> float:
        """The clean in-process median per call, measured as the candidate's samples are (profile.py, SAMPLE): on a
        GPU the larger of the device time and the host's enqueue time of each call; on the CPU the wall clock. The
        tier compares the parent's clock (parent_clock.py); this stands in where that could not run, and judges the
        physical floor and interference."""
        return self.measurement.stats.median

    def to_dict(self, with_samples: bool = False) -> dict:
        return {**self.measurement.to_dict(with_samples), "kernels": self.kernels}

    @classmethod
    def from_dict(cls, d: dict) -> Baseline:
        return cls(Measurement.from_dict(d), d.get("kernels"))


class ReferenceWorker:
    """A clean child holding one form of the reference (eager, or compiled) and its own input sets."""

    def __init__(self, task: Task, device: DeviceInfo, compile_mode: str | None, cell=None):
        """`cell` (the evaluator's jail, a callable): a task whose code is not trusted is timed in the jail, with
        compiler caches of its own (a shared one would be theirs to poison)."""
        self.task, self.device, self.compile_mode, self.cell = task, device, compile_mode, cell
        self.child: ChildProcess | None = None

    def _started(self) -> ChildProcess:
        if self.child is None:
            # CUDA and the profiler set up at start, while the reference loads and compiles: the profiler's first
            # session costs seconds, which would otherwise fall inside the kernel breakdown, on the device alone
            # (on the CPU no baseline is profiled: a second of CPU a worker for nothing)
            jailed = self.cell() if self.cell is not None else None
            env = {} if jailed is not None else compile_cache_env()
            child = ChildProcess(extra_env=env, device=self.device.kind, warm_profiler=self.device.is_cuda, cell=jailed)
            child.start()
            base = {"name": self.task.name, "source": self.task.source, "device": self.device.kind}
            seeds = [secrets.randbits(62) for _ in range(INPUT_SETS)]
            for msg, what in (
                (
                    {"op": "load_reference", **base, "seed": secrets.randbits(62), "compile_mode": self.compile_mode},
                    "loading the reference",
                ),
                ({"op": "reference_sets", "seeds": seeds, "device": self.device.kind}, "drawing inputs"),
            ):
                reply = child.request(msg, timeout_s=WORKER_TIMEOUT_S, what=what)
                if not reply.get("ok", False):
                    child.close()
                    raise BaselineError(f"the reference could not be prepared ({what}): {_first(reply)}")
            self.child = child
        return self.child

    def prepare(self, target: str) -> None:
        """Load the reference, draw its input sets and call the target once (torch.compile compiles then)."""
        self._request({"op": "warm", "target": target}, f"preparing the {target} baseline")

    def measure(self, target: str, plan: Plan) -> Measurement:
        reply = self._request({"op": "time", "target": target, "plan": asdict(plan)}, f"timing the {target} baseline")
        return Measurement.of(reply)

    def batch_request(self, msg: dict, what: str) -> tuple[dict, float]:
        """parent_clock.py's request to this worker: (reply, seconds to its early frame, by this process's clock)."""
        try:
            reply, seconds = self._started().early_request(msg, timeout_s=WORKER_TIMEOUT_S, what=what)
        except ChildFailure as exc:
            self.close()
            raise BaselineError(f"{what} failed: {exc.message}{_error_line(exc.output)}") from exc
        if not reply.get("ok", False):
            raise BaselineError(f"{what} failed: {_first(reply)}")
        return reply, seconds

    def kernels(self, target: str, iterations: int = BREAKDOWN_ITERATIONS) -> dict:
        return self._request(
            {"op": "kernels", "target": target, "iterations": iterations}, f"profiling the {target} baseline"
        )

    def _request(self, msg: dict, what: str) -> dict:
        try:
            reply = self._started().request(msg, timeout_s=WORKER_TIMEOUT_S, max_bytes=1 << 30, what=what)
        except ChildFailure as exc:
            self.close()
            raise BaselineError(f"{what} failed: {exc.message}{_error_line(exc.output)}") from exc
        if not reply.get("ok", False):
            raise BaselineError(f"{what} failed: {_first(reply)}")
        return reply

    def close(self) -> None:
        if self.child is not None:
            self.child.close()
            self.child = None


class Baselines:
    """Clean eager and compiled timings of one task on one device: cached, or measured by the worker."""

    def __init__(self, task: Task, device: DeviceInfo, compile_mode: str, plan: Plan, cell=None):
        self.task, self.device, self.compile_mode, self.plan = task, device, compile_mode, plan
        self.workers = {
            "eager": ReferenceWorker(task, device, None, cell),
            "compile": ReferenceWorker(task, device, compile_mode, cell),
        }
        self._memo: dict[str, Baseline | None] = {}
        self.notes: list[str] = []
        self._warming: threading.Thread | None = None

    def warm_in_background(self) -> None:
        """Start and prepare, in a thread, the workers of baselines that came from the cache (their process is
        needed again only by the interleaved confirmation and the settling of a fast candidate, and starting one
        there is seconds of `import torch` and compiling with the device held alone): they get ready while the
        candidate builds and is verified. Not for a task drawn as one input set: its workers would hold gigabytes
        beside the candidate's. `wait_warm()` before anything that takes the device alone."""
        todo = [t for t in TARGETS if self._memo.get(t) is not None and self.workers[t].child is None]
        if not todo or self._warming is not None or self.one_at_a_time():
            return
        self._warming = threading.Thread(target=self._prepare, args=(todo,), name="warm-baselines", daemon=True)
        self._warming.start()

    def wait_warm(self) -> None:
        if self._warming is not None:
            self._warming.join()
            self._warming = None

    def get(self, before_measuring=None) -> dict[str, Baseline | None]:
        """{"eager": ..., "compile": ...}; a baseline that cannot be timed is None (see `notes` for why). Cached ones
        are read at once, even while their workers are warming; measuring waits for the warming to end, and for
        `before_measuring()` (what ran beside the preparation must be over before anything is timed)."""
        for target in TARGETS:
            if target not in self._memo and (cached := self._cached(target)) is not None:
                self._memo[target] = cached
        todo = [t for t in TARGETS if t not in self._memo]
        if not todo:
            return dict(self._memo)
        self.wait_warm()
        if todo and self.one_at_a_time():  # each worker prepared, timed and closed before the next starts
            for target in todo:
                failed = self._prepare([target])
                if before_measuring is not None:
                    before_measuring()
                self._memo[target] = None if failed else self._measure(target)
                self.workers[target].close()
            return dict(self._memo)
        failed = self._prepare(todo)
        if before_measuring is not None:
            before_measuring()
        for target in todo:
            self._memo[target] = None if target in failed else self._measure(target)
        return dict(self._memo)

    def all_cached(self) -> bool:
        """Whether nothing is left to measure: every target's clean time is known or cached on this machine."""
        return all(self._memo.get(t) is not None or self._cached(t) is not None for t in TARGETS)

    def one_at_a_time(self) -> bool:
        """Whether the two workers run one after the other rather than side by side: when the task's inputs are so
        large that a timing takes a single set of them (measure.sets_for; KernelBench's 6.4 GB ReLU input), two
        workers at once would hold two copies of everything on the device, for little time saved."""
        sizes = self.task.sizes_on_meta(output=False)
        return sizes is not None and sets_for(sizes.inputs, self.device.kind) == 1

    def _prepare(self, targets: list[str]) -> set[str]:
        """Start and prepare the targets' workers side by side (each a process of its own: starting one is seconds of
        `import torch`, preparing the compiled one seconds of compiling), beside other work on the device; the
        targets that could not be prepared, with the reason in `notes`."""
        failed: set[str] = set()

        def prepare(target: str) -> None:
            try:
                with device_share(exclusive=False):
                    self.workers[target].prepare(target)
            except BaselineError as exc:
                self.notes.append(str(exc))
                failed.add(target)

        threads = [threading.Thread(target=prepare, args=(t,), name=f"prepare-{t}") for t in targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return failed

    def cached_medians(self) -> dict[str, float | None] | None:
        """Median times (ms) already in the cache, without measuring anything; None unless eager is cached."""
        found = {t: self._memo.get(t) or self._cached(t) for t in TARGETS}
        if found["eager"] is None:
            return None
        return {t: (b.compared_ms if b is not None else None) for t, b in found.items()}

    def refresh(self, target: str) -> Baseline:
        """Measure a baseline again now (BaselineError if it cannot be) and replace the cached timing."""
        old = self._memo.get(target)
        baseline = Baseline(self.measure(target, self.plan), old.kernels if old else None)
        self._store(target, baseline)
        self._memo[target] = baseline
        return baseline

    def _measure(self, target: str) -> Baseline | None:
        """Timed alone on the device (once prepared: `_prepare`)."""
        try:
            with device_share(exclusive=True):
                meas = self.measure(target, self.plan)
                kernels = self.workers[target].kernels(target) if self.device.is_cuda else None
        except BaselineError as exc:
            self.notes.append(str(exc))
            return None
        baseline = Baseline(meas, kernels)
        self._store(target, baseline)
        return baseline

    def _path(self, target: str) -> str:
        label = target if target == "eager" else f"compile-{self.compile_mode}"
        key = f"{self.task.sha256}|{self.device.cache_key()}|{label}|{PROTOCOL_VERSION}|{asdict(self.plan)}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        return os.path.join(cache_dir(), "baselines", f"{self.task.name}-{digest}.json")

    def _cached(self, target: str) -> Baseline | None:
        try:
            with open(self._path(target)) as f:
                return Baseline.from_dict(json.load(f))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _store(self, target: str, baseline: Baseline) -> None:
        path = self._path(target)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(baseline.to_dict(with_samples=True), f)
        os.replace(tmp, path)

    def clock_request(self, target: str):
        """parent_clock.py's request to the worker of `target` ("null": the eager worker's call that does nothing),
        started and prepared first so that no batch pays for starting or compiling."""
        self.wait_warm()
        worker = self.workers["eager" if target == "null" else target]
        if worker.child is None:
            worker.prepare("eager" if target == "null" else target)
        return lambda msg: worker.batch_request(msg, f"timing the {target} baseline's batch")

    def measure(self, target: str, plan: Plan) -> Measurement:
        """Time a baseline now, in its own clean worker."""
        self.wait_warm()
        return self.workers[target].measure(target, plan)

    def close(self) -> None:
        self.wait_warm()
        for worker in self.workers.values():
            worker.close()


def compile_cache_env() -> dict[str, str]:
    """Inductor and Triton caches that outlive the worker, so a compiled baseline builds once per machine."""
    root = cache_dir()
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton")}


def seed_compiled_headers(tmpdir: Path) -> list[str]:
    """torch.compile's precompiled headers for a process whose temporary folder is `tmpdir` and starts empty (a jailed
    process's scratch): copies of this machine's, so that the C++ kernels inductor writes for the CPU do not make
    the same header again (150 MB, 10 to 20 CPU seconds each time). Inductor keeps them in the temporary folder,
    `torchinductor_<user>/precompiled_headers`, whatever its cache folder, and names each by a hash of the
    preprocessed header, its flags and the compiler, so it uses a copy only where it would have made the same one.
    Each is copied under inductor's own lock for it (locks/<name>.lock, fcntl's, as its FileLock takes), never
    half-written; the copies are the process's own, whatever it does to them. Returns the names copied."""
    source = _inductor_temp_dir(tempfile.gettempdir()) / "precompiled_headers"
    if not source.is_dir():
        return []
    dest = _inductor_temp_dir(str(tmpdir)) / "precompiled_headers"
    copied = []
    for gch in sorted(source.glob("*.h.gch")):
        header = gch.with_suffix("")
        lock_path = source / "locks" / (header.stem + ".lock")
        if not header.is_file() or not lock_path.is_file():
            continue
        try:
            with open(lock_path) as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # a header inductor is making now is copied once it is made
                (dest / "locks").mkdir(parents=True, exist_ok=True)
                shutil.copy2(header, dest / header.name)
                shutil.copy2(gch, dest / gch.name)
            copied.append(header.name)
        except OSError:
            continue  # the process makes that one itself
    return copied


def _inductor_temp_dir(tmp: str) -> Path:
    """Where inductor keeps what outlives its cache folder (torch._inductor.runtime.cache_dir_utils.default_cache_dir,
    written out: importing it costs seconds)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return Path(tmp) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def _error_line(output: str) -> str:
    """The line of a dead worker's output that says what went wrong (torch's hints after it say nothing), in
    parentheses; empty if there is none. A worker that cannot create its CUDA context says "out of memory" here."""
    lines = [ln.strip() for ln in (output or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() and "TORCH_USE_CUDA_DSA" not in ln]
    picked = errors[-1] if errors else (lines[-1] if lines else "")
    return f" ({picked[:300]})" if picked else ""


def _first(reply: dict) -> str:
    lines = [ln for ln in str(reply.get("error", "")).splitlines() if ln.strip()]
    return lines[0][:400] if lines else "unknown error"
