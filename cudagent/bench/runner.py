"""Running a bench: a queue of tasks, one worker per GPU by default (`per_gpu` more: they share the GPU for
inputs, builds, trials and compilation, and each times alone, under the device share's lock, so timing on a GPU is
never shared), each task in a worker process of its own with a timeout (cudagent.bench.worker); a result line
appended to results.jsonl as each task ends, so `--resume` skips what is done. A task that runs out of device memory
beside others runs again once they are done, with the GPU to itself. With `--ray ADDRESS` the same worker runs as
a Ray task, one GPU each.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.bench.tasks import BenchTask, solution_for
from cudagent.device.share import LOCK_ENV
from cudagent.errors import EnvironmentProblem
from cudagent.procs import run_bounded, run_in_slots
from cudagent.resultlog import append_row, read_rows

RESULTS = "results.jsonl"
INVOCATIONS = "invocations.jsonl"  # each invocation of a (resumed) bench: start, wall time, tasks
CROWDED_OUT = "crowded-out.txt"  # tasks that ran out of device memory beside others: run alone


@dataclass
class BenchConfig:
    out_dir: Path
    device: str = "auto"  # the resolved kind: cuda or cpu
    slots: list[str | None] = field(default_factory=lambda: [None])  # GPU ids, or [None] on the CPU
    timeout_s: float = 1800.0
    solutions: Path | None = None
    optimize: dict | None = None  # policy settings and limits for agent runs
    resume: bool = False
    ray_address: str | None = None
    missing_as_failed: bool = False  # a task without a solution counts as failed (default: skipped)
    evaluator_urls: list[str] | None = None  # evaluate on `cudagent serve` services; slots are then concurrent tasks
    per_gpu: int = 1  # tasks at once on each slot's device, sharing it for everything but timing (device/share.py)
    baselines_only: bool = False  # time the references (eager, torch.compile) only: no candidate, no agent
    stop_after_s: float | None = None  # start no task after this many seconds (resume the rest later)


def done_keys(out_dir: Path) -> set[str]:
    return set(read_rows(out_dir / RESULTS))


def load_results(out_dir: Path) -> list[dict]:
    return list(read_rows(out_dir / RESULTS).values())


class Bench:
    def __init__(self, config: BenchConfig, on_result=None):
        self.config = config
        self.on_result = on_result or (lambda row: None)
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self.recorded = 0  # results this invocation recorded
        config.out_dir.mkdir(parents=True, exist_ok=True)
        self._settings_file = None
        if config.optimize is not None:
            self._settings_file = config.out_dir / "optimize-settings.json"
            self._settings_file.write_text(json.dumps(config.optimize))

    def pending(self, tasks: list[BenchTask]) -> list[BenchTask]:
        """The tasks a run will work on: with --resume, those without a result yet."""
        skip = done_keys(self.config.out_dir) if self.config.resume else set()
        return [t for t in tasks if t.key not in skip]

    def unsolved(self, tasks: list[BenchTask]) -> list[BenchTask]:
        """The tasks that will be skipped for want of a solution (none with --missing-as-failed, agent runs or
        --baselines-only)."""
        if self.config.solutions is None or self.config.missing_as_failed or self.config.baselines_only:
            return []
        return [t for t in tasks if solution_for(t, self.config.solutions) is None]

    def run(self, tasks: list[BenchTask]) -> list[dict]:
        """Run the pending tasks; return every result in OUT (with --resume, earlier ones too)."""
        todo = self.pending(tasks)
        if not self.config.resume:
            (self.config.out_dir / RESULTS).unlink(missing_ok=True)
            (self.config.out_dir / INVOCATIONS).unlink(missing_ok=True)
            (self.config.out_dir / CROWDED_OUT).unlink(missing_ok=True)
        for t in self.unsolved(todo):
            self._record(t, None, {"skipped": "no solution for this task", "correct": False, "tier": None})
            todo.remove(t)
        if self.config.ray_address:
            self._run_ray(todo)
        else:
            self._run_local(todo)
        return load_results(self.config.out_dir)

    # ----- local: one thread per slot ---------------------------------------------------------------------------

    def _run_local(self, tasks: list[BenchTask]) -> None:
        slots = [s for s in self.config.slots for _ in range(max(1, self.config.per_gpu))]
        self._deadline = time.monotonic() + self.config.stop_after_s if self.config.stop_after_s else None
        # Out of device memory beside other tasks (whose processes hold theirs even while they wait for the device):
        # again once every other task is done, one task per GPU; remembered, so a resumed bench runs them so at once.
        crowded = self._crowded_keys()
        self._crowded_out: list[BenchTask] = [t for t in tasks if t.key in crowded]
        run_in_slots([t for t in tasks if t.key not in crowded], slots, self._run_one)
        run_in_slots(self._crowded_out, self.config.slots, self._run_alone)

    def _crowded_keys(self) -> set[str]:
        path = self.config.out_dir / CROWDED_OUT
        return set(path.read_text().split()) if path.is_file() else set()

    def _run_alone(self, slot: str | None, task: BenchTask) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            return  # past --stop-after: left for a --resume
        result = run_worker(self._argv(task), slot, self.config.timeout_s)
        result["retried_alone"] = True
        self._record(task, slot, result)

    def _run_one(self, slot: str | None, task: BenchTask) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            return  # past --stop-after: left for a --resume
        lock = None
        if self.config.per_gpu > 1 and not self.config.evaluator_urls:
            locks = self.config.out_dir / ".locks"
            locks.mkdir(exist_ok=True)
            lock = str(locks / f"{slot or 'cpu'}.lock")
        result = run_worker(self._argv(task), slot, self.config.timeout_s, lock)
        if lock and _out_of_memory(result):  # beside other tasks: theirs as much as its own; alone, its own
            with self._lock:
                self._crowded_out.append(task)
                with open(self.config.out_dir / CROWDED_OUT, "a") as f:
                    f.write(task.key + "\n")
            return
        self._record(task, slot, result)

    def _argv(self, task: BenchTask) -> list[str]:
        argv = ["--task", str(task.path), "--device", self.config.device]
        if self.config.evaluator_urls:
            argv += ["--evaluator", ",".join(self.config.evaluator_urls)]
        if self.config.baselines_only:
            argv.append("--baselines-only")
        elif self._settings_file is not None:
            argv += ["--optimize", str(self._settings_file)]
        elif self.config.solutions is not None:
            solution = solution_for(task, self.config.solutions)
            if solution is not None:
                argv += ["--solution", str(solution)]
        return argv

    def _record(self, task: BenchTask, slot: str | None, result: dict) -> None:
        row = {"key": task.key, "name": task.name, "level": task.level, "gpu": slot, **result}
        with self._lock:
            append_row(self.config.out_dir / RESULTS, row)
            self.recorded += 1
            self.on_result(row)

    # ----- Ray: the same worker, one task per GPU (or CPU) ---------------------------------------------------

    def _run_ray(self, tasks: list[BenchTask]) -> None:
        try:
            import ray
        except ImportError:
            raise EnvironmentProblem("--ray needs Ray: pip install ray") from None
        ray.init(
            address=None if self.config.ray_address == "local" else self.config.ray_address,
            ignore_reinit_error=True,
            include_dashboard=False,
            log_to_driver=False,
        )
        resources = {"num_gpus": 1} if self.config.device == "cuda" else {"num_cpus": 1}
        remote = ray.remote(**resources, max_retries=0)(_ray_worker)
        pending = {remote.remote(self._argv(t), self.config.timeout_s): t for t in tasks}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except Exception as exc:  # noqa: BLE001  (a lost Ray worker is this task's failure)
                result = {"correct": False, "tier": -1, "error": f"the Ray task failed: {type(exc).__name__}: {exc}"}
            self._record(task, result.pop("ray_gpu", None), result)


def _ray_worker(argv: list[str], timeout_s: float) -> dict:
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
    result = run_worker(argv, None, timeout_s)
    result["ray_gpu"] = gpu
    return result


def _out_of_memory(result: dict) -> bool:
    text = f"{result.get('error') or ''} {result.get('trace') or ''}"
    return "out of memory" in text.lower() or "OutOfMemoryError" in text


def run_worker(argv: list[str], slot: str | None, timeout_s: float, lock: str | None = None) -> dict:
    """Run one task's worker process; its result, or a failure that says what happened to it. `lock`: the device
    share's file when several tasks run on the device at once."""
    with tempfile.TemporaryDirectory(prefix="cudagent-bench-") as tmp:
        result_file = os.path.join(tmp, "result.json")
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        if slot is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot
        if lock is not None:
            env[LOCK_ENV] = lock
        start = time.monotonic()
        proc = run_bounded(
            [sys.executable, "-m", "cudagent.bench.worker", *argv, "--result", result_file, "--started", str(start)],
            timeout_s=timeout_s,
            env=env,
        )
        if os.path.isfile(result_file):
            result = json.loads(Path(result_file).read_text())
            result["process_s"] = round(time.monotonic() - start, 2)
            return result
        tail = proc.output[-1500:].strip()
        if proc.timed_out:
            why = f"the task ran past its {timeout_s:.0f} s limit and was stopped"
        elif proc.returncode == -9:
            why = "the task's worker was killed (SIGKILL: most often the kernel's out-of-memory killer)"
        else:
            why = f"the task's worker died (exit status {proc.returncode})"
        return {
            "correct": False,
            "tier": -1,
            "error": why,
            "crashed": True,
            "output_tail": tail,
            "wall_s": round(time.monotonic() - start, 2),
        }
