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


def test_a_jailed_process_gets_copies_of_the_compiled_headers_taken_under_inductors_lock(tmp_path, monkeypatch):
    """seed_compiled_headers (for the jailed proof of a user's model): a header inductor is still writing is copied
    only once its lock is free, whole; one with no lock or no header beside it is left out; the copies are files of
    their own (what the process does to them never reaches the machine's)."""
    import fcntl
    import tempfile
    import threading

    from cudagent.evaluator.timing.baselines import _inductor_temp_dir, seed_compiled_headers

    machine = tmp_path / "machine-tmp"
    monkeypatch.setattr(tempfile, "tempdir", str(machine))
    source = _inductor_temp_dir(str(machine)) / "precompiled_headers"
    (source / "locks").mkdir(parents=True)
    for name in ("done", "making"):
        (source / f"{name}.h").write_text(f"#include <{name}>\n")
        (source / "locks" / f"{name}.lock").touch()
    (source / "done.h.gch").write_bytes(b"done")
    (source / "making.h.gch").write_bytes(b"half")
    (source / "stray.h.gch").write_bytes(b"no header, no lock")
    scratch = tmp_path / "scratch"
    dest = _inductor_temp_dir(str(scratch)) / "precompiled_headers"
    copied = []
    with open(source / "locks" / "making.lock") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # inductor making it now
        worker = threading.Thread(target=lambda: copied.extend(seed_compiled_headers(scratch)))
        worker.start()
        for _ in range(100):  # until done's copy is there (polled, at most 5 s)
            if (dest / "done.h.gch").is_file():
                break
            threading.Event().wait(0.05)
        assert (dest / "done.h.gch").read_bytes() == b"done"
        worker.join(0.3)
        assert worker.is_alive() and not (dest / "making.h.gch").exists()  # waits for the lock
        (source / "making.h.gch").write_bytes(b"whole")
    worker.join(10)
    assert copied == ["done.h", "making.h"], copied
    assert (dest / "making.h.gch").read_bytes() == b"whole" and not (dest / "stray.h.gch").exists()
    (dest / "done.h.gch").write_bytes(b"poisoned")
    assert (source / "done.h.gch").read_bytes() == b"done"
