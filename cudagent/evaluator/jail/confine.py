"""The jail's inner layer (Linux): no network, files read-only except its own scratch, no signal to any other process.

    enter(plan)    in the candidate's process, first thing (cudagent/evaluator/jail/entry.py)

Applied before the candidate's process imports torch (so before any thread exists: Landlock binds the threads
that call it and those they start), after it has given up its capabilities (isolation.drop_privileges sets
no_new_privs, which both mechanisms require of an unprivileged process). Everything the process starts later
inherits it; a build's programs enter it through entry.py --exec (compiler.py).

- **Landlock** (Linux 5.13+; what is handled grows with the kernel's ABI). Reading and executing: the system (/usr,
  /etc, /opt, /sys, the Python installation, the cudagent package, CUDA) and the paths the plan names (the hand-ins; a
  build's workspace). Writing: the process's own scratch directory (its HOME, TMPDIR and working directory) and the
  plan's write paths (a build's folders). Devices one by one (/dev/null and friends, /dev/nvidia*): never the whole of
  /dev. Of /proc only the process's own directory and the machine-wide files libraries read (cpuinfo, meminfo,
  /proc/driver/nvidia...): other processes' command lines and status stay closed, and Landlock's own rule keeps ptrace
  and /proc/<pid>/mem of any process outside the domain closed (siblings are in domains of their own). ABI 4+: TCP
  bind and connect refused. ABI 6+: abstract Unix sockets and signals scoped to the domain. The evaluator's caches
  (compiler objects, precompiled headers, baselines, link-audit facts) are outside every granted path: a candidate
  cannot read them, let alone change them.
- **seccomp**: socket() only for AF_UNIX stream and seqpacket sockets (the channel to the evaluator is inherited,
  already connected); connect() answered ECONNREFUSED (no Unix socket of another service either: a library that
  looks for a daemon, NVML for nvidia-persistenced say, finds none running); bind() allowed (see REFUSED);
  io_uring refused (its requests bypass seccomp); ptrace and process_vm_* refused; kill, tgkill and
  rt_(tg)sigqueueinfo only to the process itself, tkill and pidfd_send_signal refused (signals are refused in every
  layer: here, by Landlock's scope, and by the PID namespace that shows no other process); syscalls of another ABI
  than the process's own (x32, a foreign architecture) kill it.

Levels: `strict` refuses to run unconfined (the process exits with EXIT_UNCONFINED before any candidate code);
`best-effort` applies what the kernel offers and reports the rest; `off` applies nothing. `status()` says what
holds; it travels in the child's hello into every verdict.

One module of about 470 lines: the grants, the two mechanisms and the levels are one policy, reviewed together.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import glob
import json
import os
import platform
import site
import stat
import sys
from dataclasses import asdict, dataclass, field

from cudagent.text import counted

LEVELS = ("strict", "best-effort", "off")
DEFAULT_LEVEL = "best-effort"
EXIT_UNCONFINED = 78  # sysexits' EX_CONFIG: strict confinement was asked for and this machine cannot give it
EXIT_CUDA_CONFINED = 79  # confined, CUDA would not start: a device file or driver path the grants do not cover

# ----- Landlock (include/uapi/linux/landlock.h) -----------------------------------------------------------------

_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

_FILE_RIGHTS = (
    FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
)  # what a non-directory rule may hold
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV

# /run/nvidia-persistenced: NVML looks for the daemon's socket there and takes a refused lookup for a missing right
SYSTEM_READ = (
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/etc",
    "/opt",
    "/sys",
    "/run/nvidia-persistenced",
)
# /proc: what libraries read about the machine; never another process's directory
PROC_READ = (
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/version",
    "/proc/filesystems",
    "/proc/loadavg",
    "/proc/uptime",
    "/proc/devices",
    "/proc/modules",
    "/proc/sys",
    "/proc/driver",
)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
GPU_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


# ----- seccomp (include/uapi/linux/seccomp.h, filter.h) ---------------------------------------------------------

_ARCH = {  # machine -> (AUDIT_ARCH, seccomp, socket, connect, bind, ptrace, process_vm_readv, process_vm_writev)
    "x86_64": (0xC000003E, 317, 41, 42, 49, 101, 310, 311),
    "aarch64": (0xC00000B7, 277, 198, 203, 200, 117, 270, 271),
}
# The system calls that send a signal, by machine: (kill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo) may only aim
# at the process itself (their first argument, the target's process id, is its own); tkill names a thread of any
# process and pidfd_send_signal a process by descriptor: both refused.
_SIGNALS = {
    "x86_64": ((62, 234, 129, 297), (200, 424)),
    "aarch64": ((129, 131, 138, 240), (130, 424)),
}
_IO_URING = (425, 426, 427)  # setup, enter, register: the same number on every architecture
_X32_BIT = 0x40000000
_RET_ALLOW, _RET_KILL_PROCESS = 0x7FFF0000, 0x80000000
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_AF_UNIX, _SOCK_DGRAM, _SOCK_TYPE_MASK = 1, 2, 0xF
# The system calls the filter answers with an error instead of running them. connect(): no service is running, as
# far as the candidate can tell. bind() is not among them: the CUDA driver binds a Unix socket of its own while it
# starts (cuInit fails with error 304, "OS call failed", when bind is refused: on the H100,
# benchmarks/results/confine-gpu-probe-bisect.json), and a socket a candidate binds is reachable by no other
# candidate (connect is refused to all of them, and a datagram socket cannot be had), only by a process outside
# every sandbox that goes looking for it.
REFUSED = {
    "connect": errno.ECONNREFUSED,
    "ptrace": errno.EPERM,
    "process_vm": errno.EPERM,
    "io_uring": errno.ENOSYS,  # its requests would bypass this filter
    "signal_other": errno.EPERM,  # see _SIGNALS
}


def _ret_errno(code: int) -> int:
    return 0x00050000 | code


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


@dataclass
class Plan:
    """What one candidate process may touch beyond the system: read (the workspace) and write (a build directory);
    its own working directory is always writable."""

    level: str = DEFAULT_LEVEL
    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls(**json.loads(text))


# What holds in this process once enter() ran; reported in the child's hello.
_STATUS: dict = {"level": "off", "confined": False, "filesystem": "open", "network": "open", "notes": []}


def status() -> dict:
    return json.loads(json.dumps(_STATUS))


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _syscall(libc, number: int, *args) -> int:
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(number), *args)
    return result if result >= 0 else -ctypes.get_errno()


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is absent or disabled."""
    if not sys.platform.startswith("linux"):
        return 0
    found = _syscall(
        _libc(), _SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
    )
    return max(found, 0)


def machine_support() -> dict:
    """What this machine can enforce (for `doctor`), without confining anything."""
    abi = landlock_abi()
    return {
        "landlock_abi": abi,
        "seccomp": sys.platform.startswith("linux") and platform.machine() in _ARCH and _seccomp_available(),
        "network_by_landlock": abi >= 4,
        "scopes": abi >= 6,
    }


def _seccomp_available() -> bool:
    try:
        with open("/proc/self/status") as f:
            return any(line.startswith("Seccomp:") for line in f)
    except OSError:
        return False


def describe(state: dict) -> str:
    """One line: what confinement held in a candidate's process."""
    if not state or state.get("level") == "off":
        return "unconfined (--confine off)"
    if not state.get("confined"):
        return f"unconfined: {'; '.join(state.get('notes') or ['no mechanism was available'])}"
    return f"confined ({state['level']}): filesystem {state['filesystem']}, network {state['network']}"


# ----- applying it ----------------------------------------------------------------------------------------------


class Unconfined(Exception):
    """Strict confinement was asked for and could not be had."""


def enter(plan: Plan) -> dict:
    """Confine this process (and all it starts) as the plan says; returns status(). Raises Unconfined under
    `strict` when either mechanism is missing."""
    notes: list[str] = []
    _STATUS.update(level=plan.level, confined=False, filesystem="open", network="open", notes=notes)
    if plan.level == "off":
        return status()
    if not sys.platform.startswith("linux"):
        notes.append(f"confinement needs Linux (this is {sys.platform})")
        return _finish(plan)
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1:  # Landlock binds the calling thread and its future children only
        notes.append(f"Landlock does not bind the {counted(threads - 1, 'thread')} started before confinement")
    libc = _libc()
    fs = _landlock(libc, plan, notes)
    if fs:
        _STATUS["filesystem"] = fs
    net = _seccomp(libc, notes)
    if net:
        _STATUS["network"] = net
    _STATUS["confined"] = bool(fs and net)
    return _finish(plan)


def _finish(plan: Plan) -> dict:
    if plan.level == "strict" and not _STATUS["confined"]:
        raise Unconfined("; ".join(_STATUS["notes"]) or "no confinement mechanism is available")
    return status()


def _landlock(libc, plan: Plan, notes: list[str]) -> str | None:
    abi = _syscall(
        libc, _SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
    )
    if abi <= 0:
        notes.append("Landlock is not available in this kernel: files are not confined")
        return None
    handled = (1 << 13) - 1
    handled |= FS_REFER if abi >= 2 else 0
    handled |= FS_TRUNCATE if abi >= 3 else 0
    handled |= FS_IOCTL_DEV if abi >= 5 else 0
    attr = _RulesetAttr(handled, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0, 0)
    size = 8
    if abi >= 4:
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    ruleset = _syscall(
        libc, _SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        notes.append(f"Landlock refused a ruleset ({os.strerror(-ruleset)}): files are not confined")
        return None
    try:
        for path, rights in _rules(plan):
            _add_rule(libc, ruleset, path, rights & handled)
        # /proc/<pid>: a directory procfs builds anew on each lookup once no one holds it; held open for the
        # process's life so that the rule keeps matching (CUDA names its threads through .../task/<tid>/comm)
        own = os.open(f"/proc/{os.getpid()}", os.O_PATH | os.O_CLOEXEC)
        os.set_inheritable(own, False)
        _KEPT.append(own)
        _add_fd_rule(libc, ruleset, own, (READ | FS_WRITE_FILE | FS_TRUNCATE) & handled, path=f"/proc/{os.getpid()}")
        failed = _syscall(libc, _SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
        if failed < 0:
            notes.append(f"Landlock refused to confine the process ({os.strerror(-failed)}): files are not confined")
            return None
    finally:
        os.close(ruleset)
    if abi < 4:
        notes.append(f"Landlock ABI {abi}: TCP is refused by seccomp alone")
    if abi < 6:
        notes.append(f"Landlock ABI {abi}: abstract Unix sockets and signals are refused by seccomp alone")
    return f"read-only but its scratch (Landlock ABI {abi})"


_KEPT: list[int] = []  # descriptors the rules need held (see above)


def _rules(plan: Plan) -> list[tuple[str, int]]:
    from cudagent.resources import PACKAGE_DIR  # a module of constants: imports nothing

    read = list(SYSTEM_READ) + list(PROC_READ)
    read += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, str(PACKAGE_DIR)]
    read += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(name):
            read.append(os.environ[name])
    read += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    read += plan.read
    rules = [(p, READ) for p in read]
    rules.append(("/dev", FS_READ_DIR))  # the names of the devices, not their contents
    # the package's parent is on PYTHONPATH: a Python started confined (a build's) lists it to find the package
    rules.append((str(PACKAGE_DIR.parent), FS_READ_DIR))
    devices = list(DEVICES) + [p for pattern in GPU_DEVICES for p in sorted(glob.glob(pattern))]
    rules += [(p, DEVICE) for p in devices if _is_device(p)]
    rules += [(d, READ) for d in ("/dev/nvidia-caps", "/dev/dri") if os.path.isdir(d)]
    everything = (1 << 16) - 1
    rules += [(p, everything) for p in [os.getcwd(), *plan.write]]
    return rules


def _is_device(path: str) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def _add_rule(libc, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # absent here: nothing to grant
    try:
        _add_fd_rule(libc, ruleset, fd, rights, path)
    finally:
        os.close(fd)


def _add_fd_rule(libc, ruleset: int, fd: int, rights: int, path: str) -> None:
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        rights &= _FILE_RIGHTS
    if not rights:
        return
    attr = _PathBeneath(rights, fd)
    failed = _syscall(
        libc,
        _SYS_LANDLOCK_ADD_RULE,
        ctypes.c_int(ruleset),
        ctypes.c_int(_RULE_PATH_BENEATH),
        ctypes.byref(attr),
        ctypes.c_uint32(0),
    )
    if failed < 0:
        raise OSError(-failed, f"Landlock refused the rule for {path}: {os.strerror(-failed)}")


def _seccomp(libc, notes: list[str]) -> str | None:
    arch = _ARCH.get(platform.machine())
    if arch is None:
        notes.append(f"no seccomp filter for the {platform.machine()} architecture: the network is not confined")
        return None
    program = _filter(*arch, signals=_SIGNALS[platform.machine()], own_pid=os.getpid())
    filters = (_SockFilter * len(program))(*[_SockFilter(*ins) for ins in program])
    prog = _SockFprog(len(program), filters)
    failed = _syscall(
        libc,
        arch[1],
        ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(prog),
    )
    if failed != 0:
        why = os.strerror(-failed) if failed < 0 else f"thread {failed} could not be synchronized"
        notes.append(f"seccomp refused the filter ({why}): the network is not confined")
        return None
    return "none (sockets: Unix stream to the evaluator only)"


def _filter(
    audit_arch, _seccomp_nr, socket_nr, connect_nr, bind_nr, ptrace_nr, vm_read_nr, vm_write_nr, *, signals, own_pid
) -> list[tuple]:
    """The BPF program: (code, jt, jf, k) tuples, jumps resolved from labels."""
    LD_ABS, JEQ, JGE, AND, RET = 0x20, 0x15, 0x35, 0x54, 0x06
    numbers = {
        "connect": [connect_nr],
        "bind": [bind_nr],
        "ptrace": [ptrace_nr],
        "process_vm": [vm_read_nr, vm_write_nr],
        "io_uring": list(_IO_URING),
        "signal_other": list(signals[1]),
    }
    deny = {nr: REFUSED[name] for name in REFUSED for nr in numbers[name]}
    ops: list = [
        (LD_ABS, 0, 0, 4),  # seccomp_data.arch
        (JEQ, 0, "kill", audit_arch),
        (LD_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if audit_arch == _ARCH["x86_64"][0]:
        ops.append((JGE, "kill", 0, _X32_BIT))
    ops.append((JEQ, "socket", 0, socket_nr))
    for nr in signals[0]:
        ops.append((JEQ, "signal", 0, nr))
    for nr, code in deny.items():
        ops.append((JEQ, f"errno{code}", 0, nr))
    ops.append((RET, 0, 0, _RET_ALLOW))
    ops += [
        "signal",
        (LD_ABS, 0, 0, 16),  # args[0], low half: the target's process id (the kernel reads an int)
        (JEQ, 0, f"errno{errno.EPERM}", own_pid),
        (RET, 0, 0, _RET_ALLOW),
    ]
    ops += [
        "socket",
        (LD_ABS, 0, 0, 16),  # args[0], low half: the family
        (JEQ, 0, f"errno{errno.EAFNOSUPPORT}", _AF_UNIX),
        (LD_ABS, 0, 0, 24),  # args[1], low half: the type (with SOCK_NONBLOCK / SOCK_CLOEXEC)
        (AND, 0, 0, _SOCK_TYPE_MASK),
        (JEQ, f"errno{errno.EPERM}", 0, _SOCK_DGRAM),  # a datagram socket sends to any path without connect()
        (RET, 0, 0, _RET_ALLOW),
    ]
    for code in sorted({*deny.values(), errno.EAFNOSUPPORT}):
        ops += [f"errno{code}", (RET, 0, 0, _ret_errno(code))]
    ops += ["kill", (RET, 0, 0, _RET_KILL_PROCESS)]
    labels, position = {}, 0
    for op in ops:
        if isinstance(op, str):
            labels[op] = position
        else:
            position += 1
    program, position = [], 0
    for op in ops:
        if isinstance(op, str):
            continue
        code, jt, jf, k = op
        jt = labels[jt] - position - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - position - 1 if isinstance(jf, str) else jf
        program.append((code, jt, jf, k))
        position += 1
    return program
