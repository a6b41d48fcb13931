"""The device share among processes (cudagent/device/share.py): sharers together, a timing alone, nesting."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from cudagent.device import share as ds

HOLD = """
import sys, time
from cudagent.device.share import device_share
with device_share(exclusive=sys.argv[1] == "exclusive"):
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(tmp_path, mode: str, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, mode, str(seconds)], stdout=subprocess.PIPE, text=True, env=_env(tmp_path)
    )
    assert proc.stdout.readline().strip() == "holding"
    return proc


def _env(tmp_path) -> dict:
    import os

    from tests.agent.episodes import REPO

    return {**os.environ, ds.LOCK_ENV: str(tmp_path / "gpu0.lock"), "PYTHONPATH": str(REPO)}


def test_without_a_lock_file_every_share_is_granted_and_nests(monkeypatch):
    monkeypatch.delenv(ds.LOCK_ENV, raising=False)
    with ds.device_share(exclusive=True), ds.device_share(exclusive=False), ds.device_share(exclusive=True):
        pass
    with ds.device_share(exclusive=False), ds.device_share(exclusive=False):
        with pytest.raises(RuntimeError, match="inside a shared one"):  # a mistake whether or not a lock is in use
            with ds.device_share(exclusive=True):
                pass


def test_a_timing_waits_for_the_sharers_and_sharers_for_a_timing(tmp_path, monkeypatch):
    monkeypatch.setenv(ds.LOCK_ENV, str(tmp_path / "gpu0.lock"))
    sharer = _holder(tmp_path, "shared", 1.5)
    start = time.monotonic()
    with ds.device_share(exclusive=False):  # sharers do not wait for each other
        assert time.monotonic() - start < 1.0
    waited = ds.waited_s()
    start = time.monotonic()
    with ds.device_share(exclusive=True):  # a timing waits until the sharer is done
        assert sharer.poll() is not None or time.monotonic() - start >= 1.0
    assert ds.waited_s() - waited >= 1.0
    sharer.wait()
    timing = _holder(tmp_path, "exclusive", 1.5)
    start = time.monotonic()
    with ds.device_share(exclusive=False):  # and a sharer waits for a timing
        assert time.monotonic() - start >= 1.0
    timing.wait()


def test_shares_nest_in_a_process_but_a_timing_cannot_start_inside_a_share(tmp_path, monkeypatch):
    monkeypatch.setenv(ds.LOCK_ENV, str(tmp_path / "gpu0.lock"))
    with ds.device_share(exclusive=True), ds.device_share(exclusive=False), ds.device_share(exclusive=True):
        pass
    with ds.device_share(exclusive=False):
        with pytest.raises(RuntimeError, match="inside a shared one"):
            with ds.device_share(exclusive=True):
                pass


def test_a_process_that_holds_the_device_alone_takes_every_share_exclusively(tmp_path, monkeypatch):
    monkeypatch.setenv(ds.LOCK_ENV, str(tmp_path / "gpu0.lock"))
    monkeypatch.setenv(ds.ALONE_ENV, "1")  # as the task pool starts a task it runs alone
    try:
        with ds.device_share(exclusive=False):
            sharer = subprocess.Popen(
                [sys.executable, "-c", HOLD, "shared", "0"], stdout=subprocess.PIPE, text=True, env=_env(tmp_path)
            )
            time.sleep(1.5)
            assert sharer.poll() is None  # kept out while this process holds its "shared" share alone
        assert sharer.stdout.readline().strip() == "holding"
        sharer.wait()
    finally:
        monkeypatch.delenv(ds.ALONE_ENV, raising=False)


def test_an_observer_hears_of_a_release_while_the_share_is_still_held(tmp_path, monkeypatch):
    """A serve worker logs "timing ends" from this event: told after the lock was given up, the next session's
    "timing starts" could be logged first, and the log would show two timings at once."""
    import fcntl

    lock = tmp_path / "gpu0.lock"
    monkeypatch.setenv(ds.LOCK_ENV, str(lock))
    seen: list[tuple[str, bool]] = []

    def on_share(event: str, exclusive: bool, label: str | None) -> None:
        if event == "released":
            with open(lock, "a") as other:  # another open file: excluded as another process would be
                try:
                    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    seen.append((event, False))
                except BlockingIOError:
                    seen.append((event, True))

    monkeypatch.setattr(ds, "_observers", [on_share])
    with ds.device_share(exclusive=True):
        pass
    assert seen == [("released", True)]
