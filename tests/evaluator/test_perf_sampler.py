"""The sampler under attribution (cudagent/evaluator/audit/perf_sampler.py) on a real process: a batch longer than a
ring buffer holds loses no sample, a buffer left full counts its thread's unseen time as lost, a thread born
while sampling (still running, or ended before the batch did) is counted from the process's CPU clock, and a thread
that only blocks, thousands of times a batch, is not taken for one."""

from __future__ import annotations

import subprocess
import sys
import threading
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


@pytest.mark.parametrize("ends", [False, True], ids=["running", "ended"])
def test_a_thread_born_while_sampling_is_counted_from_the_process_clock(ends):
    runs_s = 0.5 if ends else 1e9  # of its own CPU time
    proc = _spinning(
        "import sys, threading, time\n"
        f"def spin():\n    t = time.thread_time()\n    while time.thread_time() - t < {runs_s}: pass\n"
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
            time.sleep(0.05 if ends else 0)
            s.stop()
    except Unavailable as exc:
        pytest.skip(f"perf_event_open refused here: {exc}")
    finally:
        proc.kill()
        proc.wait()
    assert s.residual_s > 0.3, (s.residual_s, s.thread_s)
    assert s.thread_s < 0.1, s.thread_s  # the one thread listed waited


def test_a_thread_that_only_blocks_is_not_taken_for_a_thread_nobody_listed():
    """A candidate that prints 30 MB a call into a pipe blocks in write() hundreds of times a batch. The process clock
    and the events' counts book a context switch differently (microseconds each): measured against the counts, such a
    process showed milliseconds a batch of threads it never started, and WORK_NOT_OWN once rejected a print flood on
    CI. Against the listed threads' scheduler clocks it shows none."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys\nprint('ready', flush=True)\nchunk = (b'0' * 100 + b'\\n') * 15000\n"
            "while sys.stdin.readline():\n"
            "    for _ in range(20): os.write(2, chunk)\n"  # one thread; each write fills the pipe many times
            "    print('done', flush=True)\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.readline() == b"ready\n"
    drained = threading.Thread(target=lambda: [None for _ in iter(lambda: proc.stderr.read1(1 << 16), b"")])
    drained.start()
    residual, switches = 0.0, 0
    try:
        for _ in range(20):
            before = _switches(proc.pid)
            with Sampler(proc.pid) as s:
                proc.stdin.write(b"go\n")
                proc.stdin.flush()
                assert proc.stdout.readline() == b"done\n"
                s.stop()
            residual += s.residual_s
            switches += _switches(proc.pid) - before
    except Unavailable as exc:
        pytest.skip(f"perf_event_open refused here: {exc}")
    finally:
        proc.kill()
        proc.wait()
        drained.join()
    assert switches > 2000, switches  # it did block, again and again
    assert residual < 0.005, (residual, switches)


def _switches(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return sum(int(line.split()[1]) for line in f if "ctxt_switches:" in line)
