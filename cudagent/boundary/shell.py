"""The model's shell: where a command a model wrote runs, and what it sees.

    sandbox = choose("auto")
    result = sandbox.run("nvcc ...", workspace, read_only=[...], timeout_s=120)   # procs.ProcResult

Three modes, chosen with `--sandbox`:

  bwrap   bubblewrap (bwrap.py, the engine of the candidate's jail too) with a view that lists what the shell may
          read: the system's programs and libraries, a few files of /etc, Python and its packages, CUDA and the
          compilers, read-only; the workspace writable, its fixed files (the reference, the build infrastructure,
          build/ and the git link) read-only; an empty /tmp, HOME and /dev/shm of its own; the GPU's device nodes.
          Not there at all: the home folder, /root, other projects, cudagent's home (other runs, the service's
          token), this run's own trajectory and git, the host's /tmp and /run (and every Unix socket in them). No
          network (a new, empty network namespace, which also holds its own abstract sockets); its own PID, IPC and
          UTS namespaces: killing the command kills everything it started.
  limits  where bubblewrap cannot run (not installed, or user namespaces refused, as in many nested containers):
          files and network are not confined; the limits below, the per-command timeout, the restoration of
          fixed files after each command and the file tools' own path checks still hold.
  none    no limits beyond the timeout (a warning says so).

Whatever the mode: the environment is an allow-list (ALLOWED_ENV: the toolchain's and the locale's variables,
never the user's keys, tokens or database addresses, whatever they are called), and nothing a command starts
outlives it (a PID namespace under bwrap, a subreaper otherwise: reaper.py). Every mode but `none` applies Limits:
resident memory and number of processes of the command's whole tree (a watchdog kills it), and the largest file
it may write. `auto` picks bwrap when a probe command runs under it, else limits, and says why.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from cudagent.boundary.bwrap import View, install_prefixes, problem_running
from cudagent.errors import CudagentError, EnvironmentProblem
from cudagent.procs import Limits, ProcResult, physical_memory_bytes, run_bounded

MODES = ("auto", "bwrap", "limits", "none")
DEFAULT_MAX_PROCESSES = 256
DEFAULT_MAX_FILE_BYTES = 8 * 2**30
SANDBOX_HOME = "/tmp/home"
# What a command gets of cudagent's environment: the toolchain's, CUDA's, the threads' and the locale's variables.
# Anything else (OPENAI_API_KEY, DATABASE_URL, GH_PAT, SSH_AUTH_SOCK, ...) stays out, whatever its name.
ALLOWED_ENV = (
    "PATH", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME",
    "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "CC", "CXX", "CUDAHOSTCXX",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VIRTUAL_ENV", "CONDA_PREFIX",
    "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
)  # fmt: skip
_LOCALE = re.compile(r"LC_[A-Z]+")
# Programs a model's commands use, whose installations outside /usr the view shows (the folder above bin/)
TOOLS = ("nvcc", "ncu", "nsys", "compute-sanitizer", "cuobjdump", "gcc", "g++", "cc", "c++", "ninja", "git", "make")


def default_limits() -> Limits:
    """Half the machine's memory, 256 processes, 8 GiB files."""
    return Limits(
        memory_bytes=physical_memory_bytes() // 2,
        max_processes=DEFAULT_MAX_PROCESSES,
        max_file_bytes=DEFAULT_MAX_FILE_BYTES,
    )


def command_env() -> dict[str, str]:
    """The allow-list's variables of ours; Sandbox.run adds a HOME of the sandbox's own (under bwrap an empty memory
    file system, with TMPDIR; otherwise a folder made for the run)."""
    env = {k: v for k, v in os.environ.items() if k in ALLOWED_ENV or _LOCALE.fullmatch(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


@dataclass
class Sandbox:
    mode: str  # "bwrap", "limits" or "none"
    limits: Limits = field(default_factory=Limits)
    note: str = ""  # why this mode, when it is not the one asked for
    home: str = ""  # outside bwrap: the HOME of its commands, a folder made for the run

    def command(self, argv: list[str], workspace: Path, protected: list[Path]) -> list[str]:
        """`argv` wrapped to run in `workspace` under this sandbox."""
        if self.mode != "bwrap":
            return list(argv)
        ws = str(Path(workspace).resolve())
        # a fixed file the model replaced by a link is not bound (that would show what the link names); it is
        # restored after the command
        fixed = [str(Path(p).absolute()) for p in protected if os.path.lexists(p) and not os.path.islink(p)]
        view = View(
            read=list(tool_paths()),
            write=[ws],
            mounts={p: p for p in fixed},
            dirs=[SANDBOX_HOME],
            chdir=ws,
            read_only_root=True,
        )
        return view.argv(list(argv))

    def run(
        self,
        command: str,
        workspace: Path,
        protected: list[Path],
        timeout_s: float,
        cancel: threading.Event | None = None,
    ) -> ProcResult:
        """Run `bash -c command` in `workspace` under this sandbox, its output merged and bounded."""
        env = command_env()
        if self.mode == "bwrap":
            env.update(HOME=SANDBOX_HOME, TMPDIR="/tmp")
        else:  # not the user's home: programs that write there (caches, histories) get a folder of the sandbox's
            env["HOME"] = self._scratch_home()
        return run_bounded(
            self.command(["bash", "-c", command], workspace, protected),
            timeout_s=timeout_s,
            env=env,
            cwd=str(workspace),
            limits=self.limits,
            cancel=cancel,
        )

    def _scratch_home(self) -> str:
        if not self.home:
            self.home = tempfile.mkdtemp(prefix="cudagent-shell-home-")
        return self.home

    def describe(self) -> str:
        if self.mode == "bwrap":
            what = "bubblewrap: workspace writable, the system and toolchain read-only, nothing else, no network"
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


@lru_cache(maxsize=1)
def tool_paths() -> tuple[str, ...]:
    """The installations of the programs a model's commands use, where they are not under /usr."""
    return tuple(install_prefixes(TOOLS))


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
