"""Running a bench: a queue of tasks, one worker per GPU by default (`per_gpu` more: they share the GPU for
inputs, builds, trials and compilation, and each times alone, under the device share's lock, so timing on a GPU is
never shared), each task in a worker process of its own with a timeout (cudagent.bench.worker, run by the task pool
of taskpool.py, which also runs a task that ran out of device memory beside others again alone); a result line
appended to results.jsonl as each task ends, so `--resume` skips what is done. With `--ray ADDRESS` the same worker
runs as a Ray task, one GPU each.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.bench.tasks import BenchTask, solution_for
from cudagent.errors import EnvironmentProblem
from cudagent.resultlog import append_row, read_rows
from cudagent.taskpool import CROWDED_OUT, TaskPool, run_worker

RESULTS = "results.jsonl"
INVOCATIONS = "invocations.jsonl"  # each invocation of a (resumed) bench: start, wall time, tasks
WORKER = "cudagent.bench.worker"


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

    # ----- local: the task pool over the slots -------------------------------------------------------------------

    def _run_local(self, tasks: list[BenchTask]) -> None:
        c = self.config
        per_slot = 1 if c.evaluator_urls else max(1, c.per_gpu)  # a service shares its own GPUs
        pool = TaskPool(WORKER, c.out_dir, c.slots, per_slot, c.timeout_s, stop_after_s=c.stop_after_s)
        pool.run(tasks, key=lambda t: t.key, argv=self._argv, record=self._record)

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
        if result.get("crashed"):
            result = {"correct": False, "tier": -1, **result}
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
    result = run_worker(WORKER, argv, dict(os.environ, PYTHONWARNINGS="ignore"), timeout_s)
    result["ray_gpu"] = gpu
    return result
