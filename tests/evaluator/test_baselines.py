"""Baselines of a task too large for two reference workers at once: timed one after the other (CPU, real workers)."""

from pathlib import Path

from cudagent.evaluator import baselines as bl
from cudagent.evaluator.measure import Plan
from cudagent.hardware import resolve_device
from cudagent.task import load_task

ROOT = Path(__file__).resolve().parents[2]


def test_a_task_drawn_as_one_set_has_its_workers_one_after_the_other(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(tmp_path / "cache"))
    task = load_task(ROOT / "examples/tasks/axpby.py")
    baselines = bl.Baselines(task, resolve_device("cpu"), "default", Plan(min_samples=20, min_seconds=0.05))
    assert not baselines.one_at_a_time()  # 128 MiB of inputs: three sets, both workers side by side
    monkeypatch.setattr(bl, "sets_for", lambda nbytes, device: 1)  # as if its inputs were gigabytes
    assert baselines.one_at_a_time()
    events: list[str] = []
    started, close = bl.ReferenceWorker._started, bl.ReferenceWorker.close

    def spy_start(worker):
        if worker.child is None:
            events.append(f"start {worker.compile_mode or 'eager'}")
        return started(worker)

    def spy_close(worker):
        if worker.child is not None:
            events.append(f"close {worker.compile_mode or 'eager'}")
        close(worker)

    monkeypatch.setattr(bl.ReferenceWorker, "_started", spy_start)
    monkeypatch.setattr(bl.ReferenceWorker, "close", spy_close)
    got = baselines.get()
    assert got["eager"].compared_ms > 0 and got["compile"].compared_ms > 0, baselines.notes
    assert events == ["start eager", "close eager", "start default", "close default"]
