"""The baselines: the task's reference timed eager and under torch.compile, in a clean process.

A `ReferenceWorker` is a child process that loads only the task's text (never candidate code), so it stays clean
for as long as its Evaluator lives and can be reused for every interleaved confirmation. Each baseline gets a worker
of its own: eager and compiled code in one process disturb each other (two OpenMP users spinning on a small CPU
slowed eager ops a hundredfold after compiled code had run). Clean timings are cached
on disk per (task hash, GPU, driver, torch, compile mode, protocol): a run, or a whole machine, pays for them once.
They are measured before any candidate process exists, so nothing a candidate does can slow them.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import asdict, dataclass

from cudagent.evaluator.measure import INPUT_SETS, Plan
from cudagent.evaluator.session import ChildFailure, ChildProcess
from cudagent.evaluator.verdict import TimeStats
from cudagent.hardware import DeviceInfo
from cudagent.resources import cache_dir
from cudagent.task import Task

# Bump when the measurement changes, so timings measured the old way are not compared with new ones.
PROTOCOL_VERSION = "4"
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

    def to_dict(self, with_samples: bool = False) -> dict:
        return {**self.measurement.to_dict(with_samples), "kernels": self.kernels}

    @classmethod
    def from_dict(cls, d: dict) -> Baseline:
        return cls(Measurement.from_dict(d), d.get("kernels"))


class ReferenceWorker:
    """A clean child holding one form of the reference (eager, or compiled) and its own input sets."""

    def __init__(self, task: Task, device: DeviceInfo, compile_mode: str | None):
        self.task, self.device, self.compile_mode = task, device, compile_mode
        self.child: ChildProcess | None = None

    def _started(self) -> ChildProcess:
        if self.child is None:
            child = ChildProcess(extra_env=compile_cache_env())
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

    def measure(self, target: str, plan: Plan) -> Measurement:
        reply = self._request({"op": "time", "target": target, "plan": asdict(plan)}, f"timing the {target} baseline")
        return Measurement.of(reply)

    def kernels(self, target: str, iterations: int = BREAKDOWN_ITERATIONS) -> dict:
        return self._request(
            {"op": "kernels", "target": target, "iterations": iterations}, f"profiling the {target} baseline"
        )

    def _request(self, msg: dict, what: str) -> dict:
        try:
            reply = self._started().request(msg, timeout_s=WORKER_TIMEOUT_S, max_bytes=1 << 30, what=what)
        except ChildFailure as exc:
            self.close()
            raise BaselineError(f"{what} failed: {exc.message}") from exc
        if not reply.get("ok", False):
            raise BaselineError(f"{what} failed: {_first(reply)}")
        return reply

    def close(self) -> None:
        if self.child is not None:
            self.child.close()
            self.child = None


class Baselines:
    """Clean eager and compiled timings of one task on one device: cached, or measured by the worker."""

    def __init__(self, task: Task, device: DeviceInfo, compile_mode: str, plan: Plan):
        self.task, self.device, self.compile_mode, self.plan = task, device, compile_mode, plan
        self.workers = {
            "eager": ReferenceWorker(task, device, None),
            "compile": ReferenceWorker(task, device, compile_mode),
        }
        self._memo: dict[str, Baseline | None] = {}
        self.notes: list[str] = []

    def get(self) -> dict[str, Baseline | None]:
        """{"eager": ..., "compile": ...}; a baseline that cannot be timed is None (see `notes` for why)."""
        for target in TARGETS:
            if target not in self._memo:
                self._memo[target] = self._cached(target) or self._measure(target)
        return dict(self._memo)

    def cached_medians(self) -> dict[str, float | None] | None:
        """Median times (ms) already in the cache, without measuring anything; None unless eager is cached."""
        found = {t: self._memo.get(t) or self._cached(t) for t in TARGETS}
        if found["eager"] is None:
            return None
        return {t: (b.measurement.stats.median if b is not None else None) for t, b in found.items()}

    def refresh(self, target: str) -> Baseline:
        """Measure a baseline again now (BaselineError if it cannot be) and replace the cached timing."""
        old = self._memo.get(target)
        baseline = Baseline(self.measure(target, self.plan), old.kernels if old else None)
        self._store(target, baseline)
        self._memo[target] = baseline
        return baseline

    def _measure(self, target: str) -> Baseline | None:
        try:
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

    def measure(self, target: str, plan: Plan) -> Measurement:
        """Time a baseline now, in its own clean worker."""
        return self.workers[target].measure(target, plan)

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()


def compile_cache_env() -> dict[str, str]:
    """Inductor and Triton caches that outlive the worker, so a compiled baseline builds once per machine."""
    root = cache_dir()
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton")}


def _first(reply: dict) -> str:
    lines = [ln for ln in str(reply.get("error", "")).splitlines() if ln.strip()]
    return lines[0][:400] if lines else "unknown error"
