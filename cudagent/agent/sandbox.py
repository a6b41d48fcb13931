"""Confinement of the agent's shell.

Model-written commands run under one of three sandboxes, chosen with `--sandbox`:

  bwrap   bubblewrap: the whole file system read-only, the workspace writable, its fixed files (the reference,
          the build infrastructure, build/ and the git link) read-only, a private /tmp and HOME, no network (a new,
          empty network namespace), own PID/IPC/UTS namespaces, and the GPU device nodes passed through. Killing
          the command kills everything it started (its PID namespace dies with it).
  limits  where bubblewrap cannot run (not installed, or user namespaces refused, as in many nested containers):
          no confinement of files or network; only the limits below, the per-command timeout, the restoration of
          fixed files after each command and the file tools' own path checks.
  none    no sandbox and no limits beyond the timeout (a warning says so).

Every mode but `none` applies Limits: resident memory and number of processes of the command's whole tree (a
watchdog kills it), and the largest file it may write. `auto` picks bwrap when a probe command runs under it, else
limits, and says why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from cudagent.errors import CudagentError, EnvironmentProblem
from cudagent.evaluator.jail.bwrap import bwrap_path, gpu_device_nodes, problem_running
from cudagent.procs import Limits, physical_memory_bytes

MODES = ("auto", "bwrap", "limits", "none")
DEFAULT_MAX_PROCESSES = 256
DEFAULT_MAX_FILE_BYTES = 8 * 2**30
SANDBOX_HOME = "/tmp/home"


def default_limits() -> Limits:
    """Half the machine's memory, 256 processes, 8 GiB files."""
    return Limits(
        memory_bytes=physical_memory_bytes() // 2,
        max_processes=DEFAULT_MAX_PROCESSES,
        max_file_bytes=DEFAULT_MAX_FILE_BYTES,
    )


@dataclass
class Sandbox:
    mode: str  # "bwrap", "limits" or "none"
    limits: Limits = field(default_factory=Limits)
    note: str = ""  # why this mode, when it is not the one asked for

    def command(self, argv: list[str], workspace: Path, protected: list[Path]) -> list[str]:
        """`argv` wrapped to run in `workspace` under this sandbox."""
        if self.mode != "bwrap":
            return list(argv)
        ws = str(Path(workspace).resolve())
        args = [
            bwrap_path(),
            "--die-with-parent",
            "--new-session",
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
        ]
        for node in gpu_device_nodes():
            args += ["--dev-bind", node, node]
        args += ["--tmpfs", "/dev/shm", "--proc", "/proc", "--tmpfs", "/tmp", "--dir", SANDBOX_HOME]
        args += ["--bind", ws, ws]
        for path in protected:
            if os.path.lexists(path):
                p = str(Path(path).absolute())
                args += ["--ro-bind", p, p]
        args += ["--setenv", "HOME", SANDBOX_HOME, "--setenv", "TMPDIR", "/tmp", "--chdir", ws, "--"]
        return args + list(argv)

    def describe(self) -> str:
        if self.mode == "bwrap":
            what = "bubblewrap: workspace writable, everything else read-only, no network"
        elif self.mode == "limits":
            what = "limits only: files and network are NOT confined"
        else:
            what = "none: model-written commands run with your permissions, unconfined"
        if self.mode != "none":
            lim = self.limits
            parts = []
            if lim.memory_bytes:
                parts.append(f"memory {lim.memory_bytes / 2**30:.0f} GiB")
            if lim.max_processes:
                parts.append(f"{lim.max_processes} processes")
            if lim.max_file_bytes:
                parts.append(f"files up to {lim.max_file_bytes / 2**30:.0f} GiB")
            what += f" ({', '.join(parts)})" if parts else ""
        return what

    def to_dict(self) -> dict:
        return {"mode": self.mode, "note": self.note, "description": self.describe()}


def choose(requested: str, limits: Limits | None = None) -> Sandbox:
    """The sandbox for `requested` (one of MODES). Asking for bwrap where it cannot run is an error."""
    if requested not in MODES:
        raise CudagentError(f"unknown sandbox {requested!r}; use one of {', '.join(MODES)}")
    limits = limits or default_limits()
    if requested == "none":
        return Sandbox("none", Limits(), "asked for no sandbox")
    if requested == "limits":
        return Sandbox("limits", limits)
    problem = bwrap_problem()
    if problem is None:
        return Sandbox("bwrap", limits)
    if requested == "bwrap":
        raise EnvironmentProblem(
            f"the bwrap sandbox cannot run here: {problem}; use --sandbox limits or --sandbox none"
        )
    return Sandbox("limits", limits, f"bubblewrap cannot run here ({problem}); files and network are not confined")


@lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """None when a command runs under the same bwrap options the shell gets; else what went wrong."""
    return problem_running(Sandbox("bwrap").command(["true"], Path.cwd(), []))
