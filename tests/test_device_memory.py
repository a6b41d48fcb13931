"""Device memory reservations among the processes sharing a GPU (cudagent/device/memory.py), with real processes."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cudagent.device import memory as dm
from cudagent.device.share import LOCK_ENV

HOLD = """
import sys, time
from cudagent.device.memory import memory_reservation
with memory_reservation(int(sys.argv[1]), 100):
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _env(tmp_path) -> dict:
    from tests.agent.episodes import REPO

    return {**os.environ, LOCK_ENV: str(tmp_path / "gpu0.lock"), "PYTHONPATH": str(REPO)}


def _holder(tmp_path, nbytes: int, seconds: float, wait: bool = True) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(nbytes), str(seconds)], stdout=subprocess.PIPE, text=True, env=_env(tmp_path)
    )
    if wait:
        assert proc.stdout.readline().strip() == "holding"
    return proc


def _ledger(tmp_path) -> dict:
    """The ledger as the processes leave it: read under their lock (a write truncates, then writes)."""
    with open(tmp_path / "gpu0.lock.memory") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        return json.loads(f.read())


@pytest.fixture(autouse=True)
def _fail_rather_than_hang():
    """A reservation waits without limit by design: a broken ledger must fail these tests, not stall the suite."""

    def expired(*_):
        raise TimeoutError("a reservation waited over 60 s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_without_a_ledger_nothing_waits(monkeypatch):
    monkeypatch.delenv(LOCK_ENV, raising=False)
    with dm.memory_reservation(10**15, 1):
        pass


def test_what_fits_goes_together_what_does_not_waits(tmp_path, monkeypatch):
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu0.lock"))
    other = _holder(tmp_path, 60, 2.0)
    start = time.monotonic()
    with dm.memory_reservation(40, 100):  # 60 + 40 fit in 100
        assert time.monotonic() - start < 1.0
        assert sorted(_ledger(tmp_path)["held"].values()) == [40, 60]
    with dm.memory_reservation(41, 100):  # 60 + 41 do not: granted once the other has released its part
        # (it may still be exiting: the release, not the process's end, is what grants this one)
        assert time.monotonic() - start >= 1.5
        assert list(_ledger(tmp_path)["held"].values()) == [41]
    assert _ledger(tmp_path)["held"] == {}
    other.wait(timeout=30)


def test_a_reservation_larger_than_the_budget_runs_alone_and_a_killed_holder_frees_its_part(tmp_path, monkeypatch):
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu0.lock"))
    other = _holder(tmp_path, 10, 60.0)
    other.kill()  # never releases: its entry is dropped once it is gone
    other.wait()
    start = time.monotonic()
    with dm.memory_reservation(500, 100):
        assert time.monotonic() - start < 1.0
        assert list(_ledger(tmp_path)["held"].values()) == [500]


def test_a_pid_taken_by_another_process_does_not_keep_a_dead_holders_part(tmp_path, monkeypatch):
    """The ledger names a process by pid and start time: a live process with a dead holder's pid is not the holder."""
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu0.lock"))
    parent = os.getppid()  # alive for the whole test, but not the process that started at tick 1
    (tmp_path / "gpu0.lock.memory").write_text(json.dumps({"held": {f"{parent}:1": 90}, "queue": []}))
    start = time.monotonic()
    with dm.memory_reservation(50, 100):
        assert time.monotonic() - start < 1.0
        assert list(_ledger(tmp_path)["held"].values()) == [50]
    (tmp_path / "gpu0.lock.memory").write_text(json.dumps({"held": {dm._identity(parent): 90}, "queue": []}))
    with pytest.raises(TimeoutError):  # the same pid with its own start time is the holder: this one waits
        signal.alarm(2)
        with dm.memory_reservation(50, 100):
            pass
    assert _ledger(tmp_path)["queue"] == []  # an interrupted wait leaves the queue


def test_reservations_are_granted_in_the_order_asked_for(tmp_path, monkeypatch):
    """A large reservation waiting is not passed by a small one that would fit: it does not starve."""
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu0.lock"))
    first = _holder(tmp_path, 50, 2.0)
    start = time.monotonic()
    large = _holder(tmp_path, 80, 0.5, wait=False)  # 50 + 80 > 100: waits for the first
    deadline = time.monotonic() + 30
    while not _ledger(tmp_path)["queue"]:  # the large one waits in the queue
        assert time.monotonic() < deadline, "the large reservation never queued: it was granted beside the first"
        time.sleep(0.05)
    with dm.memory_reservation(10, 100):  # would fit beside the first, but the large one asked before
        assert time.monotonic() - start >= 1.5  # so it waited for the first's release, then the large one's
        assert large.stdout.readline().strip() == "holding"
        assert 50 not in _ledger(tmp_path)["held"].values()  # the first's part is released
    large.wait(timeout=30)
    first.wait(timeout=30)


def test_the_expected_bytes_of_a_task():
    gib = 2**30
    alone = dm.expected_task_bytes(0, 8 * gib, 8 * gib, sets=1, with_candidate=False)
    assert alone == 8 * gib + 24 * gib + dm.PROCESS_BYTES  # one reference worker at a time
    small = dm.expected_task_bytes(gib, gib, gib, sets=3, with_candidate=False)
    assert small == 2 * (gib + 3 * gib + 3 * gib + dm.PROCESS_BYTES)  # both side by side
    assert dm.expected_task_bytes(gib, gib, gib, sets=3, with_candidate=True) > small
