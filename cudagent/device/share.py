"""A reader-writer lock on one device among the processes and threads that work on it (the dataset filter's and the
bench's workers, the sessions of a `cudagent serve` worker): work that only needs the device shares it, a timing has
it alone, and a timing that waits lets no new sharer in ahead of it (a turnstile), so timings never starve. It is
the one mechanism: every share is a flock on its own open file, so threads of one process exclude each other as
processes do.

    with device_share(exclusive=False): ...   # draw inputs, run trials, run the reference
    with device_share(exclusive=True): ...    # time something: nothing else runs on the device meanwhile

The lock file is named by CUDAGENT_DEVICE_LOCK (set by whoever starts several workers on one device); without it
every share is granted at once (one process per device needs no lock). A process that holds the device alone
(CUDAGENT_DEVICE_ALONE=1: a task the task pool runs again after it ran out of memory beside others) takes every
share exclusively.
Shares nest within a thread: an inner share of any kind inside an exclusive one is already held; an exclusive share
inside a shared one is a programming error (it would wait for itself) and raises.

`observe(callback)` tells a process of every outermost share taken and given back, with the `LABEL` of the context
that took it (a serve worker names the session: its log and /info show which timing holds the device).
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import os
import threading
import time
from collections.abc import Callable

LOCK_ENV = "CUDAGENT_DEVICE_LOCK"
ALONE_ENV = "CUDAGENT_DEVICE_ALONE"
# Who takes a share, for observers: a contextvar, so it follows asyncio.to_thread into the evaluator's thread.
LABEL: contextvars.ContextVar[str | None] = contextvars.ContextVar("device_share_label", default=None)

_held = threading.local()
_waited = [0.0]
_observers: list[Callable[[str, bool, str | None], None]] = []


def observe(callback: Callable[[str, bool, str | None], None]) -> None:
    """`callback(event, exclusive, label)` for every outermost share of this process: event "waiting" (asked),
    "held" (granted) and "released"."""
    _observers.append(callback)


def _tell(event: str, exclusive: bool) -> None:
    label = LABEL.get()
    for callback in _observers:
        callback(event, exclusive, label)


def waited_s() -> float:
    """Seconds this process has spent waiting for shares of the device."""
    return _waited[0]


def _depth() -> list[str]:
    if not hasattr(_held, "stack"):
        _held.stack = []
    return _held.stack


def alone() -> bool:
    """Whether this process (or, inside alone_here(), this thread) takes every share of the device exclusively."""
    return os.environ.get(ALONE_ENV) == "1" or getattr(_held, "alone", False)


@contextlib.contextmanager
def alone_here():
    """Every share this thread takes inside is exclusive: work run again with the device to itself (an evaluation
    that ran out of device memory beside others)."""
    before = getattr(_held, "alone", False)
    _held.alone = True
    try:
        yield
    finally:
        _held.alone = before


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
        _tell("waiting", exclusive)
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        _waited[0] += time.monotonic() - start
        stack.append("exclusive" if exclusive else "shared")
        _tell("held", exclusive)
        try:
            yield
        finally:
            stack.pop()
            _tell("released", exclusive)  # before the lock is given up: an observer's log never shows two at once
            fcntl.flock(lock, fcntl.LOCK_UN)
