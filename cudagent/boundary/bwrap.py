"""Bubblewrap, the engine of the candidate jail's outer layer and of the agent's shell: a process sees only the file
system a View names, in namespaces of its own (PID, network, IPC, UTS, mount, and a user namespace where it runs
unprivileged), and dies with the process that started it.

    View(read=[...], write=[...]).argv(["python", ...])   the command line that runs it jailed

A View is an allowlist: the system's programs and libraries, a few files of /etc that the dynamic loader and the
compilers read (never /etc as a whole: a build's computed `#include "/etc/..."` must find nothing), the Python
installation, CUDA, and the paths the caller names. Everything else (the user's home, /root, the host's /tmp,
other sessions' folders) does not exist inside. Paths that are symbolic links on the host (a merged /usr's /bin)
are recreated as links. /proc is the jail's own (no other process is visible), /dev a minimal one with the GPU's
device nodes passed through, /tmp and /dev/shm empty memory file systems.

The agent's shell (boundary/shell.py) uses the same engine with a view of its own: the same system part, the
toolchain, and its workspace writable.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

# Read and executed by everything: the system's programs and libraries. /sys is read by CUDA (the PCI topology) and
# by torch (CPU counts); nothing in it is a secret of the user's.
SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/sys", "/run/nvidia-persistenced")
# Of /etc, what the dynamic loader, Debian's compiler links (alternatives), the C library's user lookups and the
# GPU's vendor libraries read: public files, listed one by one.
ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "passwd",
    "group",
    "nsswitch.conf",
    "localtime",
    "os-release",
    "nvidia",
    "OpenCL",
    "vulkan",
    "glvnd",
)
TMPFS_BYTES = 4 << 30  # /tmp of a jail: a memory file system, so bounded (nvcc's temporary files fit)


def bwrap_path() -> str:
    return os.environ.get("CUDAGENT_BWRAP") or shutil.which("bwrap") or "bwrap"


def gpu_device_nodes() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri"))


def unprivileged() -> bool:
    """Whether bubblewrap must make a user namespace (it runs as an ordinary user); root needs none."""
    return os.geteuid() != 0


@dataclass
class View:
    """What a jailed process sees of the file system, and where it starts."""

    read: list[str] = field(default_factory=list)  # bound read-only at their own paths (absent ones skipped)
    write: list[str] = field(default_factory=list)  # bound writable at their own paths
    mounts: dict[str, str] = field(default_factory=dict)  # inside path -> host path, bound read-only
    dirs: list[str] = field(default_factory=list)  # empty directories made in the jail (mount points)
    chdir: str | None = None
    devices: bool = True  # the GPU's device nodes
    system: bool = True  # SYSTEM_DIRS, ETC_ENTRIES, Python and CUDA (a caller that binds / itself says False)
    keep_capabilities: bool = False  # the first process keeps its capabilities (inside the user namespace, or
    # root's where there is none): the fork server needs them to give each candidate namespaces of its own
    read_only_root: bool = False  # the view's own root (where /etc, /home... would be) refuses writes too

    def argv(self, command: list[str]) -> list[str]:
        args = [bwrap_path(), "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net"]
        args += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if unprivileged():
            args.append("--unshare-user")
        args += ["--cap-add", "ALL"] if self.keep_capabilities else ["--cap-drop", "ALL"]
        args += ["--dev", "/dev", "--proc", "/proc", "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp"]
        args += ["--size", str(TMPFS_BYTES), "--tmpfs", "/dev/shm"]
        if self.devices:
            for node in gpu_device_nodes():
                args += ["--dev-bind", node, node]
        bound: list[str] = []
        for path in (system_paths() if self.system else []) + list(self.read):
            args += _bind("--ro-bind", path, bound)
        for path in self.write:
            args += _bind("--bind", path, bound)
        for inside, host in self.mounts.items():
            args += ["--ro-bind", os.path.realpath(host), inside]
        for path in self.dirs:
            args += ["--dir", path]
        if self.read_only_root:
            args += ["--remount-ro", "/"]
        if self.chdir:
            args += ["--chdir", self.chdir]
        return args + ["--", *command]


def _bind(flag: str, path: str, bound: list[str]) -> list[str]:
    """Arguments that make `path` appear at its own place; none when it is absent on the host or a read-only path
    already bound above it covers it (a writable one is always bound: it may lie under a read-only one)."""
    path = os.path.abspath(path)
    if not os.path.lexists(path):
        return []
    if flag == "--ro-bind" and any(path == b or path.startswith(b.rstrip("/") + "/") for b in bound):
        return []
    bound.append(path)
    if os.path.islink(path) and flag == "--ro-bind":
        return ["--symlink", os.readlink(path), path]
    return [flag, os.path.realpath(path), path]


@functools.cache
def system_paths() -> list[str]:
    """The read-only part every view shares: the system, a few files of /etc, Python, its packages and CUDA."""
    from cudagent.resources import PACKAGE_DIR

    paths = list(SYSTEM_DIRS) + [f"/etc/{name}" for name in ETC_ENTRIES]
    paths += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, str(PACKAGE_DIR)]
    paths += [p for p in sys.path if p and os.path.isdir(p) and ("site-packages" in p or "dist-packages" in p)]
    paths += [os.environ[n] for n in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(n)]
    paths += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    paths += ["/usr/local/cuda", "/opt/nvidia", "/usr/local/nvidia"]
    seen: list[str] = []
    for p in paths:
        p = os.path.abspath(p)
        if p not in seen:
            seen.append(p)
    return seen


def install_prefixes(programs) -> list[str]:
    """The installation of each program (a name on PATH, or a path) that is not the system's /usr: the folder above
    its bin/ (a compiler under /opt, CUDA under /usr/local/cuda), for a view to show."""
    found: list[str] = []
    for program in programs:
        where = shutil.which(program) if program else None
        if not where:
            continue
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(where)))
        if prefix not in ("/", "/usr") and prefix not in found:
            found.append(prefix)
    return found


@functools.cache
def bwrap_problem() -> str | None:
    """None when bubblewrap runs a command in a view like the jail's (own namespaces, the system read-only); else
    what went wrong, in a few words."""
    return problem_running(View(devices=False).argv(["true"]))


def problem_running(argv: list[str]) -> str | None:
    """None when `argv` (a bubblewrap command line running `true`) runs; else what went wrong, in a few words."""
    path = argv[0]
    if not shutil.which(path) and not os.path.isfile(path):
        return "bwrap is not installed (Debian/Ubuntu: apt install bubblewrap)"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run: {exc}"
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
        return f"bwrap failed: {first}"
    return None


@functools.cache
def version() -> str:
    try:
        done = subprocess.run([bwrap_path(), "--version"], capture_output=True, text=True, timeout=10)
        return done.stdout.strip() or "bubblewrap"
    except (OSError, subprocess.TimeoutExpired):
        return "bubblewrap"
