"""Device memory reserved by the processes that share one GPU (the bench's `--per-gpu` workers, beside the device
share of device/share.py): a task reserves what it is expected to take before it puts anything on the device, and
waits while the reservations of the others leave too little. Tasks that cannot fit together then take turns
instead of running out of memory half-way through and starting again alone.

    with memory_reservation(nbytes, budget): ...

The ledger is a JSON file beside the device share's lock (CUDAGENT_DEVICE_LOCK + ".memory"): what each process holds
and the queue of those waiting, read and written under an flock. Reservations are granted in the order asked for
(a large task waiting is not passed by small ones that would fit, so it never starves); the entries of processes
that are gone are dropped, so a worker that was killed frees its part (a process is named by its pid and its start
time: a pid that another process gets later does not keep a dead holder's part). A reservation larger than the
budget is granted when nothing else is held: that task then runs alone. Without the lock variable (one process per
device) nothing is reserved. An estimate can be wrong: running out of memory beside others still sends a task to run
alone afterwards (bench/runner.py). How long a task waited is its bench phase `memory_wait`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time

from cudagent.device.share import LOCK_ENV
from cudagent.procs import start_time

POLL_S = 0.5


def _ledger_path() -> str | None:
    lock = os.environ.get(LOCK_ENV)
    return f"{lock}.memory" if lock else None


def _identity(pid: int) -> str:
    """A process as the ledger names it: its pid and its start time, so that a pid the system hands to another
    process after a holder died is not taken for the holder (on a host that runs for weeks, pids come round)."""
    return f"{pid}:{start_time(pid)}"


def _alive(identity: str) -> bool:
    pid_text, _, started = identity.partition(":")
    try:
        pid = int(pid_text)
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass
    return start_time(pid) == started


def _read(f) -> dict:
    f.seek(0)
    try:
        data = json.loads(f.read() or "{}")
        held = {str(k): int(v) for k, v in data.get("held", {}).items()}
        return {"held": held, "queue": [str(p) for p in data.get("queue", [])]}
    except (ValueError, AttributeError, TypeError):
        return {"held": {}, "queue": []}


def _write(f, ledger: dict) -> None:
    f.seek(0)
    f.truncate()
    f.write(json.dumps(ledger))


def _try_reserve(path: str, nbytes: int, budget: int) -> bool:
    """Reserve when this process is first in the queue and its part fits beside the others' (or none are held)."""
    me = _identity(os.getpid())
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        ledger = _read(f)
        held = {who: n for who, n in ledger["held"].items() if who != me and _alive(who)}
        queue = [who for who in ledger["queue"] if _alive(who)]
        if me not in queue:
            queue.append(me)
        granted = queue[0] == me and (not held or sum(held.values()) + nbytes <= budget)
        if granted:
            held[me] = nbytes
            queue.pop(0)
        _write(f, {"held": held, "queue": queue})
        return granted


def _release(path: str) -> None:
    me = _identity(os.getpid())
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        ledger = _read(f)
        ledger["held"].pop(me, None)
        ledger["queue"] = [who for who in ledger["queue"] if who != me]
        _write(f, ledger)


@contextlib.contextmanager
def memory_reservation(nbytes: int, budget: int):
    """Hold `nbytes` of the device's `budget` for the block (waiting for it first); a no-op without a ledger."""
    path = _ledger_path()
    if not path or nbytes <= 0:
        yield
        return
    try:
        while not _try_reserve(path, nbytes, budget):
            time.sleep(POLL_S)
        yield
    finally:
        _release(path)  # also leaves the queue when the wait itself was interrupted


# A CUDA context with torch's kernels loaded, the flush buffer and the allocator's slack, per process.
PROCESS_BYTES = 1 << 30
BUDGET_FRACTION = 0.9  # of the device's memory: what the ledger hands out


def expected_task_bytes(params: int, inputs: int, output: int, sets: int, with_candidate: bool) -> int:
    """The most one evaluation task is expected to hold on its device at once (what it reserves): the reference
    workers, each with the weights, its input sets and three outputs' worth (one made while the last is still
    held, and the temporaries of a call, which a norm makes as large as its input), side by side, or one after the
    other where a single set is drawn (Baselines.one_at_a_time); with a candidate, also its process (each set kept
    twice: as drawn and as changed before each call) and the evaluator's own sets. The null check and the
    validation in the task's own process hold less, and release it before these start."""
    worker = params + sets * inputs + 3 * output + PROCESS_BYTES
    total = worker * (1 if sets == 1 else 2)
    if with_candidate:
        total += params + 3 * sets * inputs + 3 * output + 2 * PROCESS_BYTES
    return total


def device_budget_bytes() -> int:
    """What the ledger hands out on the current CUDA device."""
    import torch

    return int(BUDGET_FRACTION * torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
