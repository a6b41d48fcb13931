"""The process-tree boundary of one candidate: whatever its process starts ends with it.

    keep(tree)   in the trusted process about to become a candidate's (a fresh fork of the fork server, or
                 entry.py started anew): returns in a new child, which goes on to run the harness; the caller stays
                 behind as that child's keeper and never returns.

tree "namespace" (inside bubblewrap, where the keeper holds CAP_SYS_ADMIN over the jail's namespaces): the child
gets a PID namespace and a mount namespace of its own. It is process 1 there, so when it ends, however it ends, the
kernel kills every process it started (double forks and setsid() included); it mounts an empty memory file system
on /tmp (its scratch: HOME, TMPDIR and working directory, gone with the namespace), another on /dev/shm, and a /proc
that shows only its own processes.

tree "subreaper" (no bubblewrap on this machine): the keeper becomes the subreaper of everything below it, so that
orphans come back to it instead of to PID 1, and kills them all once the child has ended. The child's scratch is
the directory the caller chose.

Either way the child dies with its keeper (PR_SET_PDEATHSIG), and the keeper exits as its child did (the same
status, or the same signal) once nothing of the candidate is left: the evaluator, which sees the keeper's end,
sees the end of the whole tree.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal

from cudagent.reaper import end_as, end_orphans, wait_for

TREES = ("namespace", "subreaper")
SCRATCH = "/tmp"  # the candidate's own memory file system, in its own mount namespace (tree "namespace")
SCRATCH_BYTES = 4 << 30  # what its scratch may hold: a memory file system is memory

CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
EXIT_NO_JAIL = 77  # the namespaces could not be made: the machine changed since the probe, or a limit was reached


class JailFailed(OSError):
    """A namespace or mount the jail needs was refused."""


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise JailFailed(err, f"{what}: {os.strerror(err)}")


def keep(tree: str) -> None:
    """Fork the candidate's process and keep it (see the module's note). Returns only in the child."""
    if tree not in TREES:
        raise ValueError(f"unknown process tree {tree!r}")
    libc = _libc()
    keeper = os.getpid()
    if tree == "namespace":
        _check(libc.unshare(CLONE_NEWPID | CLONE_NEWNS), "unshare(PID and mount namespaces)")
    else:
        _check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")
    pid = os.fork()
    if pid == 0:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if tree == "subreaper" and os.getppid() != keeper:  # the keeper died before the line above
            os._exit(EXIT_NO_JAIL)
        if tree == "namespace":
            _own_mounts(libc)
        return
    _keep(pid, tree)


def _own_mounts(libc) -> None:
    """In the child's new mount namespace: nothing it mounts reaches the jail; its own /tmp, /dev/shm and /proc."""
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount(/, private)")
    size = f"size={SCRATCH_BYTES},mode=0700".encode()
    _check(libc.mount(b"tmpfs", SCRATCH.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, size), "mount(/tmp)")
    _check(libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1g,mode=0700"), "mount(/dev/shm)")
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    _check(libc.mount(b"proc", b"/proc", b"proc", flags, None), "mount(/proc)")
    os.chdir(SCRATCH)


def _keep(child: int, tree: str) -> None:
    """The keeper's life: wait for the child, leave nothing behind, end as it ended."""
    os.closerange(3, _max_fd())  # the channel and anything else are the child's alone
    status = wait_for(child)
    if tree == "subreaper":
        end_orphans()
    end_as(status)


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 1024
