"""The sampler under attribution (cudagent/evaluator/audit/perf_sampler.py) on a real process: a batch longer than a
ring buffer holds loses no sample, a buffer left full counts its thread's unseen time as lost, and a thread born
while sampling is counted from the process's CPU clock."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import cudagent.evaluator.audit.perf_sampler as perf_sampler
from cudagent.evaluator.audit.perf_sampler import Sampler, Unavailable, _process_cpu_ns

BUFFER_S = 2.8  # a ring buffer holds about 2.7 s of one thread's samples


def _spinning(code: str):
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    return proc


def _sample(pid: int, cpu_seconds: float) -> Sampler:
    """Sample `pid` until it has used `cpu_seconds` of CPU time (a loaded machine gives it less than the wall's)."""
    start, deadline = _process_cpu_ns(pid), time.monotonic() + 60
    try:
        with Sampler(pid) as sampler:
            while _process_cpu_ns(pid) - start < cpu_seconds * 1e9 and time.monotonic() < deadline:
                time.sleep(0.05)
            sampler.stop()
    except Unavailable as exc:
        pytest.skip(f"perf_event_open refused here: {exc}")
    return sampler


@pytest.fixture
def spinner():
    proc = _spinning("print('ready', flush=True)\nwhile True: pass")
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.slow
def test_a_batch_longer_than_a_ring_buffer_loses_no_sample(spinner):
    s = _sample(spinner.pid, BUFFER_S + 0.7)
    assert s.thread_s > BUFFER_S and s.lost_s == 0, (s.thread_s, s.lost_s)
    assert s.sampled_s > 0.9 * s.thread_s, (s.sampled_s, s.thread_s)  # the kernel's time is the rest


@pytest.mark.slow
def test_a_ring_buffer_left_full_counts_its_threads_unseen_time_as_lost(spinner, monkeypatch):
    monkeypatch.setattr(perf_sampler, "DRAIN_S", 3600.0)  # the defence off: read only at the end
    s = _sample(spinner.pid, BUFFER_S + 0.7)
    assert s.sampled_s < BUFFER_S and s.lost_s > 0.4, (s.sampled_s, s.lost_s)
    assert abs(s.sampled_s + s.lost_s + s.kernel_s - s.thread_s) < 0.01


def test_a_thread_born_while_sampling_is_counted_from_the_process_clock():
    proc = _spinning(
        "import sys, threading\n"
        "def spin():\n    while True: pass\n"
        "print('ready', flush=True)\nsys.stdin.readline()\n"  # waits, with one thread, until told
        "threading.Thread(target=spin, daemon=True).start()\nsys.stdin.readline()\n"
    )
    try:
        with Sampler(proc.pid) as s:
            start, deadline = _process_cpu_ns(proc.pid), time.monotonic() + 60
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
            # until the new thread has used 0.5 s of CPU (a loaded machine gives it less than the wall's)
            while _process_cpu_ns(proc.pid) - start < 0.5e9 and time.monotonic() < deadline:
                time.sleep(0.05)
            s.stop()
    except Unavailable as exc:
        pytest.skip(f"perf_event_open refused here: {exc}")
    finally:
        proc.kill()
        proc.wait()
    assert s.residual_s > 0.3, (s.residual_s, s.thread_s)
    assert s.thread_s < 0.1, s.thread_s  # the one thread listed waited
