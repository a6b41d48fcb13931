"""Timing orchestration in the trusted parent.

Baselines (eager and torch.compile) are timed in a clean child that loads only the task's text and never
imports candidate code, with no candidate process alive, and are cached per (task hash, GPU, driver, torch,
compile mode, protocol) so a run pays for them once. The candidate is timed inside its own child over input sets
the parent drew with secret seeds; outputs of a few randomly chosen timed iterations come back and are checked
against the reference here.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import asdict, dataclass

from cudagent.evaluator.compare import Tolerance, compare
from cudagent.evaluator.measure import Plan
from cudagent.evaluator.session import ChildFailure, ChildProcess
from cudagent.evaluator.verdict import TimeStats, Violation
from cudagent.hardware import DeviceInfo
from cudagent.resources import cache_dir
from cudagent.task import Task

# Bump when the measurement changes, so cached baselines measured the old way are not compared with new numbers.
PROTOCOL_VERSION = "1"
INPUT_SETS = 3
RECHECKS = 3
BASELINE_TIMEOUT_S = 1200.0


@dataclass
class Measurement:
    stats: TimeStats
    wall: TimeStats
    ms: list[float]

    @classmethod
    def of(cls, reply: dict) -> Measurement:
        return cls(TimeStats.of(reply["ms"]), TimeStats.of(reply["wall_ms"]), list(reply["ms"]))

    def to_dict(self, with_samples: bool = False) -> dict:
        d = {"event_ms": asdict(self.stats), "wall_ms": asdict(self.wall)}
        if with_samples:
            d["samples_ms"] = self.ms
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Measurement:
        return cls(TimeStats(**d["event_ms"]), TimeStats(**d["wall_ms"]), list(d.get("samples_ms", [])))


def default_plan(device: DeviceInfo) -> Plan:
    return Plan()


class BaselineTimer:
    """Eager and compiled timings of a task's reference, measured once per machine and cached on disk."""

    def __init__(self, task: Task, device: DeviceInfo, compile_mode: str = "default", plan: Plan | None = None):
        self.task, self.device, self.compile_mode = task, device, compile_mode
        self.plan = plan or default_plan(device)

    def _path(self, mode: str) -> str:
        key = f"{self.task.sha256}|{self.device.cache_key()}|{mode}|{PROTOCOL_VERSION}|{asdict(self.plan)}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        return os.path.join(cache_dir(), "baselines", f"{self.task.name}-{digest}.json")

    def cached(self, mode: str) -> Measurement | None:
        try:
            with open(self._path(mode)) as f:
                return Measurement.from_dict(json.load(f))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def get(self) -> tuple[dict[str, Measurement | None], list[str]]:
        """({"eager": ..., "compile": ...}, notes), measuring what is not cached yet.

        A baseline that cannot be timed (a model torch.compile cannot handle, say) is None, with a note saying why;
        without a compiled time a candidate can reach tier 2 at most.
        """
        modes = {"eager": None, "compile": self.compile_mode}
        out: dict[str, Measurement | None] = {m: self.cached(self._label(m)) for m in modes}
        notes = []
        for m in [m for m, v in out.items() if v is None]:
            try:
                out[m] = self.measure({m: modes[m]})[m]
            except BaselineError as exc:
                notes.append(str(exc))
                continue
            self._store(self._label(m), out[m])
        return out, notes

    def _label(self, mode: str) -> str:
        return "eager" if mode == "eager" else f"compile-{self.compile_mode}"

    def _store(self, label: str, meas: Measurement) -> None:
        path = self._path(label)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(meas.to_dict(with_samples=True), f)
        os.replace(tmp, path)

    def measure(self, modes: dict[str, str | None], plan: Plan | None = None) -> dict[str, Measurement]:
        """Time the reference in a fresh clean process for each mode (eager: None, else a torch.compile mode)."""
        plan = plan or self.plan
        results = {}
        for label, compile_mode in modes.items():
            base = {"name": self.task.name, "source": self.task.source, "device": self.device.kind}
            seeds = [secrets.randbits(62) for _ in range(INPUT_SETS)]
            steps = [
                (
                    {"op": "load_reference", **base, "seed": secrets.randbits(62), "compile_mode": compile_mode},
                    "loading the reference",
                ),
                ({"op": "reference_sets", "seeds": seeds, "device": self.device.kind}, "drawing inputs"),
                ({"op": "time", "plan": asdict(plan)}, "timing"),
            ]
            try:
                with ChildProcess(extra_env=compile_cache_env()) as ref:
                    for msg, what in steps:
                        reply = ref.request(msg, timeout_s=BASELINE_TIMEOUT_S, max_bytes=1 << 30, what=what)
                        if not reply.get("ok", False):
                            raise BaselineError(
                                f"the {label} baseline could not be timed ({what}): "
                                f"{str(reply.get('error')).strip()[:400]}"
                            )
            except ChildFailure as exc:
                raise BaselineError(f"the {label} baseline could not be timed: {exc.message}") from exc
            results[label] = Measurement.of(reply)
        return results


class BaselineError(Exception):
    """A baseline could not be measured; the message says why."""


def compile_cache_env() -> dict[str, str]:
    """Inductor and Triton caches that outlive the baseline worker, so a compiled baseline builds once."""
    root = cache_dir()
    return {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
    }


def time_candidate(
    child: ChildProcess, task: Task, ref_model, device: DeviceInfo, plan: Plan, tol: Tolerance, timeout_s: float
) -> tuple[Measurement, list[Violation]]:
    """Time the candidate already loaded in `child`; re-check outputs of randomly chosen timed iterations."""
    sets = [task.make_inputs(secrets.randbits(62), device.kind) for _ in range(INPUT_SETS)]
    expected = [task.run(ref_model, s) for s in sets]
    picks = sorted({secrets.randbelow(plan.min_samples) for _ in range(RECHECKS)})
    plan = Plan(**{**asdict(plan), "recheck": tuple(picks)})
    out_bytes = sum(_nbytes(e) for e in expected)
    reply = child.request(
        {"op": "time", "plan": asdict(plan), "inputs": [[x.cpu() for x in s] for s in sets]},
        timeout_s=timeout_s,
        max_bytes=64 * 1024 * 1024 + 2 * RECHECKS * out_bytes,
        what="timing the candidate",
    )
    if not reply.get("ok", False):
        return None, [Violation("FORWARD_RAISED", f"[timing] ModelNew.forward raised {reply.get('error')}")]
    violations = []
    for index, kept in sorted(reply.get("kept", {}).items(), key=lambda kv: int(kv[0])):
        k = int(kept["set"])
        if not 0 <= k < len(expected):
            violations.append(Violation("TIMED_OUTPUT_MISMATCH", "[timing] the timed outputs came back mislabeled"))
            continue
        result = compare(expected[k], kept["outputs"], tol)
        if not result.ok:
            violations.append(
                Violation(
                    "TIMED_OUTPUT_MISMATCH",
                    f"[timing, iteration {index}] "
                    f"{result.violations[0].message}; outputs must stay right while being timed",
                )
            )
            break
    if picks and not reply.get("kept"):
        violations.append(Violation("TIMED_OUTPUT_MISMATCH", "[timing] no timed outputs came back for re-checking"))
    return Measurement.of(reply), violations


def _nbytes(out) -> int:
    import torch

    if isinstance(out, torch.Tensor):
        return out.numel() * out.element_size()
    if isinstance(out, (list, tuple)):
        return sum(_nbytes(o) for o in out)
    return 0
