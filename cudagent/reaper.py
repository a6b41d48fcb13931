"""Run a program so that nothing it starts outlives it, with its file-size limit set.

    python -S reaper.py FILE_BYTES -- PROGRAM ARGS...      (FILE_BYTES -1: no limit)

This process becomes the subreaper of everything below it (PR_SET_CHILD_SUBREAPER): a process that leaves its
parent (a double fork, `setsid`, `nohup ... &`) comes back to it instead of to PID 1. Once the program ends, it
kills all that came back, until none is left, and exits as the program did. Whoever kills this process instead
(a timeout) kills what is below it first (procs.kill_tree). Where PID namespaces exist (bubblewrap) they end a
tree by themselves; this is for every other way a command runs (`--sandbox limits` and `none`, builds without the
jail). Standard library only, and no site import: it starts in milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36


def end_orphans() -> None:
    """Kill every process that came back to this subreaper, until none is left (one forking while the others die
    comes back too)."""
    me = str(os.getpid())
    while True:
        for pid in [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(p) == me]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _parent(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[1].decode()
    except (OSError, IndexError):
        return None


def main(argv: list[str]) -> None:
    size, program = int(argv[1]), argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = os.fork()
    if child == 0:
        if size >= 0:
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG and says so
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:
            os.execvp(program[0], program)
        except OSError as exc:
            sys.stderr.write(f"{program[0]}: {exc.strerror}\n")
            os._exit(127)
    status = wait_for(child)
    end_orphans()
    end_as(status)


def wait_for(child: int) -> int:
    """Reap children (orphans that came back too) until `child` ends; its wait status."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == child:
            return status


def end_as(status: int) -> None:
    """Exit as a process with this wait status did: its exit code, or killed by its signal (for whoever reads this
    process's status)."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to put back (EINVAL)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv)
