"""Many tasks, each in a worker process of its own, over device slots: the bench's tasks and the dataset filter's.

    pool = TaskPool("cudagent.bench.worker", out_dir, slots=["0", "1"], per_slot=2, timeout_s=1800)
    pool.run(tasks, key=..., argv=..., record=...)

One thread per slot (a GPU id, or None for a CPU worker; `per_slot` threads share each GPU) takes the next task as
soon as it is free and runs `python -m MODULE ARGV... --result FILE` with a time limit (and a memory limit, when
given) on that slot's device. Workers that share a device share it through the device share's lock
(device/share.py): work side by side, timings alone. The worker writes one JSON object to FILE; a worker that dies
or runs too long is described instead (`crashed`). A task that ran out of device memory beside other tasks
(`out_of_memory` in its result) is theirs as much as its own: it runs again once every other task is done, one task
per device, with the device to itself, and is remembered in OUT/crowded-out.txt so that a resumed run does so at
once. `record(task, slot, result)` is called as each task ends (from the slot's thread).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.device.share import ALONE_ENV, LOCK_ENV
from cudagent.procs import Limits, run_bounded, run_in_slots

CROWDED_OUT = "crowded-out.txt"


@dataclass
class TaskPool:
    module: str  # the worker's module: python -m MODULE ... --result FILE
    out_dir: Path  # where the device share's locks and the crowded-out list live
    slots: list[str | None] = field(default_factory=lambda: [None])  # GPU ids, or [None] on the CPU
    per_slot: int = 1  # tasks at once on each slot's device
    timeout_s: float = 1800.0
    memory_bytes: int | None = None  # host memory one worker's process tree may hold
    env: dict[str, str] = field(default_factory=dict)  # added to every worker's environment
    stop_after_s: float | None = None  # start no task after this many seconds (a resumed run does the rest)

    def run(
        self,
        tasks: list,
        key: Callable[[object], str],
        argv: Callable[[object], list[str]],
        record: Callable[[object, str | None, dict], None],
    ) -> None:
        deadline = time.monotonic() + self.stop_after_s if self.stop_after_s else None
        crowded_file = self.out_dir / CROWDED_OUT
        remembered = set(crowded_file.read_text().split()) if crowded_file.is_file() else set()
        crowded = [t for t in tasks if key(t) in remembered]
        shared = self.per_slot > 1 or len(set(self.slots)) < len(self.slots)
        lock = threading.Lock()

        def beside_others(slot: str | None, task) -> None:
            if deadline is not None and time.monotonic() > deadline:
                return  # past the stop: left for a resumed run
            result = self._run_one(argv(task), slot, shared)
            if shared and out_of_memory(result):
                with lock:
                    crowded.append(task)
                    with open(crowded_file, "a") as f:
                        f.write(key(task) + "\n")
                return
            record(task, slot, result)

        def alone(slot: str | None, task) -> None:
            if deadline is not None and time.monotonic() > deadline:
                return
            result = self._run_one(argv(task), slot, shared=False, alone=True)
            result["retried_alone"] = True
            record(task, slot, result)

        self.out_dir.mkdir(parents=True, exist_ok=True)
        threads = [s for s in self.slots for _ in range(max(1, self.per_slot))]
        run_in_slots([t for t in tasks if key(t) not in remembered], threads, beside_others)
        run_in_slots(crowded, sorted(set(self.slots), key=str), alone)

    def _run_one(self, argv: list[str], slot: str | None, shared: bool, alone: bool = False) -> dict:
        env = dict(os.environ, PYTHONWARNINGS="ignore", **self.env)
        if slot is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot
        if shared:
            locks = self.out_dir / ".locks"
            locks.mkdir(exist_ok=True)
            env[LOCK_ENV] = str(locks / f"{slot or 'cpu'}.lock")
        if alone:
            env[ALONE_ENV] = "1"
        return run_worker(self.module, argv, env, self.timeout_s, self.memory_bytes)


def run_worker(module: str, argv: list[str], env: dict, timeout_s: float, memory_bytes: int | None = None) -> dict:
    """One task's worker process: its result, or a `crashed` one that says what happened to it."""
    with tempfile.TemporaryDirectory(prefix="cudagent-task-") as tmp:
        result_file = os.path.join(tmp, "result.json")
        start = time.monotonic()
        command = [sys.executable, "-m", module, *argv, "--result", result_file, "--started", str(start)]
        limits = Limits(memory_bytes=memory_bytes) if memory_bytes else None
        proc = run_bounded(command, timeout_s=timeout_s, env=env, limits=limits)
        if os.path.isfile(result_file):
            result = json.loads(Path(result_file).read_text())
            result["process_s"] = round(time.monotonic() - start, 2)
            return result
    if proc.timed_out:
        why = f"the task ran past its {timeout_s:.0f} s limit and was stopped"
    elif proc.killed_for:
        why = f"the task {proc.limit_message}"
    elif proc.returncode == -9:
        why = "the task's worker was killed (SIGKILL: most often the kernel's out-of-memory killer)"
    else:
        why = f"the task's worker died (exit status {proc.returncode})"
    return {
        "crashed": True,
        "error": why,
        "output_tail": proc.output[-1500:].strip(),
        "wall_s": round(time.monotonic() - start, 2),
    }


def out_of_memory(result: dict) -> bool:
    """Whether a worker's result says the task ran out of device memory (workers set `out_of_memory`)."""
    return bool(result.get("out_of_memory"))


def mentions_out_of_memory(text: str) -> bool:
    """Whether what a worker met (an exception, a child's error) is the device running out of memory: what a worker
    sets `out_of_memory` by.

    >>> mentions_out_of_memory("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    True
    >>> mentions_out_of_memory("OUTPUT_MISMATCH: [stock-1] wrong")
    False
    """
    return "OutOfMemoryError" in text or "out of memory" in text.lower()
