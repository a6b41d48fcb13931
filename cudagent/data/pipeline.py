"""Filtering a folder of task files into a dataset: the cheap filters in this process (static, duplicates,
similarity to a reference set), then the running ones in a worker process per task (cudagent.data.check_worker, run
by the task pool of taskpool.py), several at once (one per GPU, or `jobs` on the CPU). Every verdict is appended to
OUT/filter.jsonl as it comes (fsync'ed), so a killed run loses nothing and `resume` skips what is done; kept tasks
are copied to OUT/tasks/.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.data.filters import similarity_reason, static_reason
from cudagent.data.similarity import Fingerprint, fingerprint, most_similar
from cudagent.procs import physical_memory_bytes
from cudagent.resultlog import append_row, read_rows
from cudagent.taskpool import TaskPool

RESULTS = "filter.jsonl"


@dataclass
class FilterConfig:
    device: str = "cpu"
    # one worker each: a GPU id (repeated for several workers on a GPU) or None (a CPU worker); workers on one device
    # run their checks side by side and their timings one at a time (cudagent.device.share)
    slots: list[str | None] = field(default_factory=lambda: [None])
    runtime_ms: tuple[float, float] = (0.0, 1e9)
    compile_backend: str = "inductor"  # what torch.compile uses; "off" skips the filter
    references: dict[str, str] = field(default_factory=dict)  # name -> source of the decontamination set
    max_similarity: float = 0.9
    timeout_s: float = 300.0  # one task's running filters
    resume: bool = False


def task_key(path: Path, source: str) -> str:
    return f"{path.stem}:{hashlib.sha256(source.encode()).hexdigest()[:12]}"


def done_rows(out: Path) -> dict[str, dict]:
    return read_rows(out / RESULTS)


class Pipeline:
    def __init__(self, config: FilterConfig, out: Path, on_result=None):
        self.config, self.out = config, out
        self.on_result = on_result or (lambda row: None)
        self._lock = threading.Lock()
        (out / "tasks").mkdir(parents=True, exist_ok=True)
        self._refs: dict[str, Fingerprint] = {}
        for name, source in config.references.items():
            try:
                self._refs[name] = fingerprint(source)
            except SyntaxError:
                continue

    def run(self, files: list[Path]) -> list[dict]:
        """Filter `files`; return every row in OUT (with resume, earlier ones too)."""
        done = done_rows(self.out) if self.config.resume else {}
        if not self.config.resume:
            (self.out / RESULTS).unlink(missing_ok=True)
            shutil.rmtree(self.out / "tasks", ignore_errors=True)
            (self.out / "tasks").mkdir(parents=True)
        seen: dict[str, str] = {r["digest"]: r["name"] for r in done.values() if r.get("digest")}
        to_run: list[tuple[Path, dict]] = []
        for path in files:
            source = path.read_text(errors="replace")
            key = task_key(path, source)
            if key in done:
                continue
            row = {"key": key, "name": path.stem, "path": str(path)}
            why = static_reason(source)
            if why:
                self._record({**row, "dropped_by": "static", "why": why})
                continue
            fp = fingerprint(source)
            row["digest"] = fp.digest
            if fp.digest in seen:
                self._record({**row, "dropped_by": "duplicate", "why": f"the same normalized AST as {seen[fp.digest]}"})
                continue
            seen[fp.digest] = path.stem
            closest, score = most_similar(fp, self._refs)
            row["similarity"] = {"closest": closest, "score": round(score, 4)}
            why = similarity_reason(closest, score, self.config.max_similarity)
            if why:
                self._record({**row, "dropped_by": "similarity", "why": why})
                continue
            to_run.append((path, row))
        self._run_workers(to_run)
        return list(done_rows(self.out).values())

    # ----- the running filters, in the task pool ------------------------------------------------------------------

    def _run_workers(self, items: list) -> None:
        c = self.config
        env = {
            # inductor's cache is keyed by the code it generates, so the run's workers share one (a chain's kernels
            # compiled for one task serve the next task that fuses the same ops at the same sizes)
            "TORCHINDUCTOR_CACHE_DIR": str(self.out / ".inductor"),
            # one compile thread: a task fuses into a few kernels, and a pool of compile processes per worker
            # (inductor's default) multiplies processes by workers on cores the workers already share
            "TORCHINDUCTOR_COMPILE_THREADS": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "1"),
        }
        memory = physical_memory_bytes() // (2 * max(1, len(c.slots)))
        pool = TaskPool("cudagent.data.check_worker", self.out, c.slots, 1, c.timeout_s, memory, env)
        pool.run(items, key=lambda item: item[1]["key"], argv=self._argv, record=self._finished)

    def _argv(self, item: tuple) -> list[str]:
        c = self.config
        return [
            "--task", str(item[0]), "--device", c.device, "--runtime-ms", f"{c.runtime_ms[0]},{c.runtime_ms[1]}",
            "--compile", c.compile_backend, "--task-timeout", str(max(10.0, c.timeout_s / 2)),
        ]  # fmt: skip

    def _finished(self, item: tuple, slot: str | None, result: dict) -> None:
        path, row = item
        if result.get("crashed"):
            tail = (result.get("output_tail") or "").strip().splitlines()[-1:] or [""]
            result = {"dropped_by": "runs", "why": result["error"] + (f": {tail[0][:200]}" if tail[0] else "")}
        # the worker's wall time: the filter's throughput
        row = {**row, **_kept(result), "check_s": result.get("process_s", result.get("wall_s"))}
        if row.get("dropped_by") is None:
            shutil.copyfile(path, self.out / "tasks" / f"{path.stem}.py")
        self._record(row)

    def _record(self, row: dict) -> None:
        with self._lock:
            append_row(self.out / RESULTS, row)
            self.on_result(row)


def _kept(result: dict) -> dict:
    """What a row keeps of a check worker's result."""
    keys = ("dropped_by", "why", "runtime_ms", "retried_alone")
    return {k: result[k] for k in keys if k in result}
