"""Baselines of a task too large for two reference workers at once: timed one after the other (CPU, real workers)."""

import threading
from pathlib import Path

import pytest

import cudagent.evaluator.timing.baselines as bl
from cudagent.device.info import resolve_device
from cudagent.evaluator.timing.measure import Plan
from cudagent.task import load_task
from tests.caches import seeded_cache

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # each test runs whole commands, builds or timings


def test_a_task_drawn_as_one_set_has_its_workers_one_after_the_other(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))
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


def test_the_workers_of_cached_baselines_get_ready_in_the_background(tmp_path, monkeypatch):
    """Baselines that come from the cache have no worker; the evaluator has theirs started and prepared in a thread
    (after the null check, while the candidate builds), so that a confirmation or settling of the timing does not
    start them with the device held alone. Any use of the workers waits for that thread first."""
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))
    task = load_task(ROOT / "examples/tasks/axpby.py")
    plan = Plan(min_samples=20, min_seconds=0.05)
    first = bl.Baselines(task, resolve_device("cpu"), "default", plan)
    measured = first.get()
    first.close()
    cached = bl.Baselines(task, resolve_device("cpu"), "default", plan)
    assert cached.get() == measured and all(w.child is None for w in cached.workers.values())
    started_by: list[str] = []
    started = bl.ReferenceWorker._started

    def spy(worker):
        if worker.child is None:
            started_by.append(threading.current_thread().name)
        return started(worker)

    monkeypatch.setattr(bl.ReferenceWorker, "_started", spy)
    cached.warm_in_background()
    assert cached._warming is not None
    cached.measure("eager", plan)  # waits for the warming thread: no second start
    assert sorted(started_by) == ["prepare-compile", "prepare-eager"]  # the warming's threads, not this one
    assert all(w.child is not None for w in cached.workers.values())
    cached.warm_in_background()  # nothing left to warm
    assert cached._warming is None
    cached.close()
