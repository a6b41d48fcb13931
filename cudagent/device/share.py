"""A reader-writer lock on one device among the processes that work on it (the dataset filter's and the bench's
workers): work that only needs the device shares it, a timing has it alone, and a timing that waits lets no new
sharer in ahead of it (a turnstile), so timings never starve.

    with device_share(exclusive=False): ...   # draw inputs, run trials, run the reference
    with device_share(exclusive=True): ...    # time something: nothing else runs on the device meanwhile

The lock file is named by CUDAGENT_DEVICE_LOCK (set by whoever starts several workers on one device); without it
every share is granted at once (one process per device needs no lock). A process that holds the device alone
(`hold_alone`, for a task retried after running out of memory beside others) takes every share exclusively.
Shares nest within a process: an inner share of any kind inside an exclusive one is already held; an exclusive share
inside a shared one is a programming error (it would wait for itself) and raises.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time

LOCK_ENV = "CUDAGENT_DEVICE_LOCK"
ALONE_ENV = "CUDAGENT_DEVICE_ALONE"

_held = threading.local()
_waited = [0.0]


def waited_s() -> float:
    """Seconds this process has spent waiting for shares of the device."""
    return _waited[0]


def _depth() -> list[str]:
    if not hasattr(_held, "stack"):
        _held.stack = []
    return _held.stack


def alone() -> bool:
    """Whether this process takes every share of the device exclusively."""
    return os.environ.get(ALONE_ENV) == "1"


def hold_alone() -> None:
    """From now on, this process's shares are exclusive (its children's too: the variable is inherited)."""
    os.environ[ALONE_ENV] = "1"


@contextlib.contextmanager
def device_share(exclusive: bool):
    path = os.environ.get(LOCK_ENV)
    exclusive = exclusive or alone()
    stack = _depth()
    if stack and exclusive and "exclusive" not in stack:
        raise RuntimeError("an exclusive share of the device was asked for inside a shared one")
    if not path or stack:  # no lock to take, or this process holds it already
        stack.append("exclusive" if exclusive or "exclusive" in stack else "shared")
        try:
            yield
        finally:
            stack.pop()
        return
    with open(path + ".turnstile", "a") as turnstile, open(path, "a") as lock:
        start = time.monotonic()
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        _waited[0] += time.monotonic() - start
        stack.append("exclusive" if exclusive else "shared")
        try:
            yield
        finally:
            stack.pop()
            fcntl.flock(lock, fcntl.LOCK_UN)
