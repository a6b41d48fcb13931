"""Process-level walls between the trusted evaluator and the candidate's process (Linux).

- The evaluator makes itself non-dumpable: its /proc/<pid>/mem, environment and descriptors then open only to a
  process holding CAP_SYS_PTRACE, not to every process of the same user.
- The candidate's process gives up every capability before any candidate code is loaded (bounding, effective,
  permitted, inheritable and ambient sets, and no_new_privs so that no setuid program gives them back). Where the
  evaluator runs as root, this is what keeps the candidate out of the evaluator's memory: uid 0 without
  CAP_SYS_PTRACE cannot read a non-dumpable process, and without CAP_DAC_OVERRIDE it reaches only files root owns.

Both are best effort where the kernel refuses (a container without prctl, say); `status()` says what holds, and
the verdict's notes repeat it when something does not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522
_LAST_CAP = 63


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def protect_this_process() -> bool:
    """Make this process non-dumpable; True if it is now."""
    libc = _libc()
    if libc is None:
        return False
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    return libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def capabilities() -> int:
    """This process's permitted capability set as a bit mask (0: none)."""
    libc = _libc()
    if libc is None:
        return 0
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return 0
    return data[0].permitted | (data[1].permitted << 32)


def drop_privileges() -> bool:
    """Give up every capability for good; True if none is left."""
    libc = _libc()
    if libc is None:
        return True
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if capabilities() == 0:
        return True
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(_LAST_CAP + 1):  # needs CAP_SETPCAP, so before the sets below are emptied
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: past the last
            break
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    libc.capset(ctypes.byref(header), data)
    return capabilities() == 0


def status() -> dict:
    """What holds in this process: dumpable or not, capabilities left, and the user it runs as."""
    libc = _libc()
    dumpable = libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) if libc is not None else None
    return {"uid": os.geteuid(), "dumpable": dumpable, "capabilities": hex(capabilities())}
