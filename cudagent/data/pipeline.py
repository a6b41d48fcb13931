"""Filtering a folder of task files into a dataset: the cheap filters in this process (static, duplicates,
similarity to a reference set), then the running ones in a worker process per task, several at once (one per GPU,
or `jobs` on the CPU). Every verdict is appended to OUT/filter.jsonl as it comes (fsync'ed), so a killed run loses
nothing and `resume` skips what is done; kept tasks are copied to OUT/tasks/.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.data.filters import similarity_reason, static_reason
from cudagent.data.similarity import Fingerprint, fingerprint, most_similar
from cudagent.procs import Limits, physical_memory_bytes, run_bounded, run_in_slots
from cudagent.resultlog import append_row, read_rows

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
        (out / ".locks").mkdir(exist_ok=True)  # one per device: checks share it, timings have it alone
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

    # ----- the running filters, one worker thread per slot --------------------------------------------------------

    def _run_workers(self, items: list) -> None:
        run_in_slots(items, self.config.slots, self._run_one)

    def _run_one(self, slot: str | None, item: tuple) -> None:
        path, row = item
        started = time.monotonic()
        row = {**row, **self._check(path, slot)}
        row["check_s"] = round(time.monotonic() - started, 2)  # the worker's wall time: the filter's throughput
        if row.get("dropped_by") is None:
            shutil.copyfile(path, self.out / "tasks" / f"{path.stem}.py")
        self._record(row)

    def _check(self, path: Path, slot: str | None) -> dict:
        c = self.config
        with tempfile.TemporaryDirectory(prefix="cudagent-data-") as tmp:
            result_file = os.path.join(tmp, "result.json")
            # inductor's cache is keyed by the code it generates, so the run's workers share one (a chain's kernels
            # compiled for one task serve the next task that fuses the same ops at the same sizes)
            env = dict(os.environ, PYTHONWARNINGS="ignore", TORCHINDUCTOR_CACHE_DIR=str(self.out / ".inductor"))
            # one compile thread: a task fuses into a few kernels, and a pool of compile processes per worker
            # (inductor's default) multiplies processes by workers on cores the workers already share
            env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
            env["CUDAGENT_DEVICE_LOCK"] = str(self.out / ".locks" / f"{slot or 'cpu'}.lock")
            if slot is not None:
                env["CUDA_VISIBLE_DEVICES"] = slot
            argv = [
                sys.executable, "-m", "cudagent.data.check_worker", "--task", str(path), "--result", result_file,
                "--device", c.device, "--runtime-ms", f"{c.runtime_ms[0]},{c.runtime_ms[1]}",
                "--compile", c.compile_backend, "--task-timeout", str(max(10.0, c.timeout_s / 2)),
            ]  # fmt: skip
            memory = physical_memory_bytes() // (2 * max(1, len(c.slots)))
            proc = run_bounded(argv, timeout_s=c.timeout_s, env=env, limits=Limits(memory_bytes=memory))
            if os.path.isfile(result_file):
                result = json.loads(Path(result_file).read_text())
                result.pop("trace", None)
                return result
        if proc.timed_out:
            return {"dropped_by": "runs", "why": f"still running after {c.timeout_s:.0f} s (killed)"}
        if proc.killed_for:
            return {"dropped_by": "runs", "why": f"the task {proc.limit_message}"}
        tail = proc.output.strip().splitlines()[-1:] or [""]
        return {"dropped_by": "runs", "why": f"its checker died (exit status {proc.returncode}): {tail[0][:200]}"}

    def _record(self, row: dict) -> None:
        with self._lock:
            append_row(self.out / RESULTS, row)
            self.on_result(row)
