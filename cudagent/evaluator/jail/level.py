"""How strong the jail is on this machine: decided once, by a trusted probe, before any candidate exists.

    decide("best-effort", "cuda") -> Jail    (cached for the life of the process)

The jail has three layers (jail/__init__.py). Which hold depends on the machine alone: whether bubblewrap runs
(installed, user namespaces allowed), whether the kernel has Landlock and seccomp, and whether the CUDA driver
starts inside them. probe.py answers for each combination, strongest first, in a throwaway process that enters the
jail as a candidate's would; the first that works is this machine's jail for every candidate of this process.
Once decided, a candidate process that fails to start (CUDA included) has failed itself: nothing a candidate does
makes the next one run in a weaker jail.

| level         | what it takes                                                                               |
| ------------- | ------------------------------------------------------------------------------------------- |
| strict        | all three layers, CUDA starting inside them; otherwise UNCONFINED and nothing runs          |
| best-effort   | the strongest combination the probe finds; every verdict says what did not hold, and why     |
| off           | none (only what every child gets: no capabilities, a sanitized environment, time limits)     |
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field

import cudagent.boundary.bwrap as bwrap
from cudagent.evaluator.jail.confine import LEVELS, Unconfined

PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Jail:
    """What holds for every candidate process of this evaluator."""

    level: str  # asked for: strict, best-effort or off
    engine: str | None = None  # the outer layer's engine ("bubblewrap 0.8.0") where it holds
    tree: str = "subreaper"  # keeper.py: "namespace" (a PID namespace of its own) or "subreaper"
    inner: str = "off"  # the inner layer's level (confine.py): Landlock and seccomp
    notes: tuple[str, ...] = field(default_factory=tuple)  # what does not hold, and why

    @property
    def jailed(self) -> bool:
        return self.engine is not None

    def to_dict(self) -> dict:
        return {**asdict(self), "notes": list(self.notes)}

    def describe(self) -> str:
        if self.level == "off":
            return "no jail (--confine off)"
        parts = [
            f"{self.engine}: own namespaces, the file system read-only but its scratch" if self.engine else "no jail",
            "a PID namespace of its own" if self.tree == "namespace" else "orphans ended by a subreaper",
            "Landlock and seccomp" if self.inner != "off" else "no Landlock or seccomp",
        ]
        return "; ".join(parts)


@functools.cache
def decide(level: str, device: str) -> Jail:
    """The jail every candidate of this process gets at `level` on `device` ("cpu" or "cuda"); raises Unconfined
    when `level` is strict and the machine cannot give all of it."""
    if level not in LEVELS:
        raise ValueError(f"unknown confinement level {level!r}")
    if level == "off":
        return Jail("off")
    notes: list[str] = []
    problem = bwrap.bwrap_problem()
    if problem is None:
        why = _probe(device, "namespace", level, jailed=True)
        if why is None:
            return Jail(level, bwrap.version(), "namespace", level)
        notes.append(f"bubblewrap runs, but the jail does not hold: {why}")
    else:
        notes.append(f"no outer layer: {problem}")
    if level == "strict":
        raise Unconfined("; ".join(notes))
    why = _probe(device, "subreaper", "best-effort", jailed=False)
    if why is None:
        return Jail(level, None, "subreaper", "best-effort", tuple(notes))
    notes.append(f"no inner layer: {why}")
    return Jail(level, None, "subreaper", "off", tuple(notes))


def under_scratch() -> str | None:
    """The first of cudagent's package and its Python that lies under the candidates' scratch folder (/tmp), which
    a candidate's process replaces with an empty one of its own: its imports would fail there. None when none does."""
    from cudagent.evaluator.jail.keeper import SCRATCH
    from cudagent.resources import PACKAGE_DIR

    for what, path in (("cudagent", str(PACKAGE_DIR)), ("its Python environment", sys.prefix)):
        real = os.path.realpath(path)
        if real == SCRATCH or real.startswith(SCRATCH.rstrip("/") + "/"):
            return f"{what} is installed under {SCRATCH} ({real}), which a candidate's jail replaces with an empty "
    return None


def _probe(device: str, tree: str, inner: str, jailed: bool) -> str | None:
    """None when a process enters this combination and (on cuda) starts CUDA inside it; else why not."""
    from cudagent.resources import PACKAGE_DIR

    if tree == "namespace":
        hidden = under_scratch()
        if hidden:
            return hidden + "one; install it elsewhere (a clone and its .venv outside /tmp) for the jail to hold"

    command = [sys.executable, "-s", "-m", "cudagent.evaluator.jail.probe", tree, inner, device]
    view = bwrap.View(devices=device == "cuda", keep_capabilities=True, chdir="/")
    env = {k: os.environ[k] for k in ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES") if k in os.environ}
    env.update(PYTHONPATH=str(PACKAGE_DIR.parent), PYTHONDONTWRITEBYTECODE="1", HOME="/tmp")
    try:
        done = subprocess.run(
            view.argv(command) if jailed else command,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the probe did not run ({exc})"
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"the probe failed: {tail[:300]}"
    if not report.get("ok"):
        return report.get("why") or "the probe failed"
    if tree == "namespace" and report.get("processes") != ["1"]:
        return f"the probe's PID namespace held other processes: {report.get('processes')}"
    return None
