"""The trusted parent's handle on a child process (child.py): a candidate's, in its cell's jail, or the trusted
reference worker.

Each child starts with a sanitized environment (no API keys, no PYTHONPATH of the user's), in its own session, with
stdout and stderr drained into a bounded buffer that nobody parses for verdicts. A candidate's runs under its keeper
(keeper.py: a PID namespace of its own inside bubblewrap, where whatever it starts ends with it, and a scratch of
its own), confined by the inner layer. A request that outlives its timeout kills the whole tree; so does a child
whose tree holds more host memory than its limit (half the machine's by default), before the kernel's OOM killer
picks a victim of its own, or more processes than MAX_PROCESSES; a child that dies mid-request is reported with its
exit status or signal.

One module of about 410 lines: starting a child, the channel's requests and the watch that kills its tree are one
life of one process, read together (its jail, keeper and wire live in their own modules).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from cudagent.evaluator.heap import KEEP_HEAP
from cudagent.evaluator.jail.cell import Cell
from cudagent.evaluator.jail.confine import EXIT_CUDA_CONFINED, EXIT_UNCONFINED
from cudagent.evaluator.jail.keeper import EXIT_NO_JAIL
from cudagent.evaluator.jail.zygote import Zygote, ZygoteGone
from cudagent.evaluator.wire import DEFAULT_MAX_FRAME, Arena, Channel, ChannelClosed, ChannelTimeout, FrameTooLarge
from cudagent.procs import (
    BoundedOutput,
    Limits,
    Watchdog,
    cpu_seconds,
    drain,
    end_tree,
    gib,
    innermost,
    physical_memory_bytes,
    popen_lasting,
    process_tree,
)
from cudagent.resources import PACKAGE_DIR

PASS_THROUGH_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CXX",
    "CC",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TRITON_PTXAS_PATH",
    "NVIDIA_VISIBLE_DEVICES",
)
DEFAULT_START_TIMEOUT_S = 180.0
MAX_PROCESSES = 64  # processes alive at once in a candidate's tree (its own is one; nothing it needs starts more)
ARENA_MAX_BYTES = 1 << 30  # shared memory per child at most (page-locked where CUDA is up); the rest takes the socket
ARENA_SLACK = 1 << 20  # alignment padding, and room for an output a little larger than the reference's


class ChildFailure(Exception):
    """The child died, hung or misbehaved; `code` is the violation code to report."""

    def __init__(self, code: str, message: str, output: str = ""):
        super().__init__(message)
        self.code, self.message, self.output = code, message, output


def child_env(home: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASS_THROUGH_ENV if k in os.environ}
    env.update(
        HOME=home,
        PYTHONPATH=str(PACKAGE_DIR.parent),
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        # torch warns on import when NumPy is absent; nothing here needs NumPy
        PYTHONWARNINGS="ignore:Failed to initialize NumPy",
        GLIBC_TUNABLES=KEEP_HEAP,  # heap.py: a CPU timing measures the kernel, not its page faults
    )
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(extra or {})
    return env


class ChildProcess:
    def __init__(
        self,
        *,
        extra_env: dict[str, str] | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        wrapper: list[str] | None = None,
        device: str = "cpu",
        memory_limit_bytes: int | None = None,
        zygote: Zygote | None = None,
        warm_profiler: bool = False,
        cell: Cell | None = None,
    ):
        self.device = device  # the child initializes CUDA while it waits for its first request
        self.zygote = zygote  # fork from it (milliseconds) rather than start a new interpreter (seconds)
        self.warm_profiler = warm_profiler  # set CUPTI up at start (CUDA): kernels will be recorded
        self.extra_env = extra_env or {}
        self.wrapper = list(wrapper or [])  # a command the child runs under (a profiler such as ncu)
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.channel: Channel | None = None
        self.output = BoundedOutput(head=16 * 1024, tail=48 * 1024)
        self.home: str | None = None
        self.memory_limit_bytes = memory_limit_bytes or physical_memory_bytes() // 2
        self.watchdog: Watchdog | None = None
        self.isolation: dict = {}  # what the child reported of its own isolation (isolation.status())
        # The jail of a candidate's process (cell.py): its keeper, bubblewrap and the inner layer, entered before the
        # child imports torch; None for processes that run no candidate code (the reference's worker). A wrapper
        # (ncu) runs it outside: the caller decides and says so.
        self.cell = None if self.wrapper else cell
        self._host_home: str | None = None  # a scratch made here (none when the jail gives the child its own)
        self.hello_pid: int | None = None  # the pid the child gave of itself (its own namespace's)
        self.greeted = False  # its hello was received

    def __enter__(self) -> ChildProcess:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self.spawn()
        self.handshake()

    def spawn(self) -> None:
        """Start the process without waiting for it: it imports torch (and initializes CUDA) while the caller goes on
        with other work, such as the build. It loads no candidate code until asked to."""
        cell = self.cell
        self.home = cell.scratch() if cell is not None else None
        if self.home is None:
            self.home = self._host_home = tempfile.mkdtemp(prefix="cudagent-child-")
        ours, theirs = socket.socketpair()
        args = ["--device", self.device] + (["--warm-profiler"] if self.warm_profiler else [])
        if self.wrapper:  # a profiler such as ncu reads the GPU's counters through this process: it keeps its rights
            args.append("--keep-privileges")
        env = child_env(self.home, self.extra_env)
        view = cell.view() if cell is not None else None
        cwd = "/" if view is not None else self.home  # inside the jail, the keeper moves to the child's own scratch
        if cell is not None:
            env["TMPDIR"] = self.home
            args = ["--tree", cell.jail.tree] + args
            if cell.jail.inner != "off":
                args = ["--confine", cell.plan().to_json()] + args
        self.proc = None
        if self.zygote is not None and not self.wrapper and self.zygote.alive():
            try:
                self.proc = self.zygote.spawn(args, env, cwd, theirs.fileno())
            except ZygoteGone:
                self.proc = None
        if self.proc is None:
            command = [sys.executable, "-s", "-m", "cudagent.evaluator.jail.entry", *args, "--fd", str(theirs.fileno())]
            self.proc = popen_lasting(
                [*self.wrapper, *(view.argv(command) if view is not None else command)],
                pass_fds=(theirs.fileno(),),
                env=env,
                cwd=self._host_home or "/",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        theirs.close()
        self._reader = drain(self.proc.stdout, self.output)
        limits = Limits(memory_bytes=self.memory_limit_bytes, max_processes=MAX_PROCESSES if cell else None)
        self.watchdog = Watchdog(self.proc, limits, period_s=0.2)
        self.channel = Channel(ours)

    def handshake(self) -> None:
        """Wait for the child's hello (its device started, its jail entered); once: a process made ready earlier
        (Evaluator._ready_alone) is not waited for again."""
        if self.greeted:
            return
        hello = self._receive(self.start_timeout_s, DEFAULT_MAX_FRAME, "starting")
        if hello.get("op") != "hello":
            raise ChildFailure("CRASHED", "the evaluation process did not start properly", self.output.text())
        self.isolation = hello.get("isolation") or {}
        self.hello_pid = hello.get("pid")
        self.greeted = True

    @property
    def confinement(self) -> dict:
        """What confinement the child reported in its hello (confine.status())."""
        return self.isolation.get("confinement") or {"level": "off", "confined": False, "notes": []}

    def use_arena(self, nbytes: int, device: str) -> None:
        """Let tensors of up to `nbytes` in a message travel through shared memory (wire.Arena) rather than the
        socket; the child copies them to and from `device`, this process to the device of its own tensors. A larger
        arena replaces a smaller one; tensors that do not fit still take the socket."""
        nbytes = min(nbytes + ARENA_SLACK, ARENA_MAX_BYTES)
        if self.channel.arena is not None and self.channel.arena.size >= nbytes:
            return
        arena = Arena.create(nbytes)
        try:
            reply = self.request(
                {"op": "arena", "device": device}, timeout_s=60, what="sharing memory", fds=(arena.fd,)
            )
        except BaseException:
            arena.close()
            raise
        if not reply.get("ok", False) or reply.get("size") != arena.size:
            arena.close()
            self.kill()
            raise ChildFailure("CRASHED", f"the evaluation process refused shared memory: {reply.get('error')}")
        self.channel.attach(arena, device)

    def request(
        self, msg: dict, timeout_s: float, max_bytes: int = DEFAULT_MAX_FRAME, what: str = "", fds: tuple = ()
    ) -> dict:
        return self.timed_request(msg, timeout_s, max_bytes, what, fds)[0]

    def timed_request(
        self, msg: dict, timeout_s: float, max_bytes: int = DEFAULT_MAX_FRAME, what: str = "", fds: tuple = ()
    ) -> tuple[dict, float]:
        """(reply, seconds from the end of sending to the reply's arrival), by this process's own clock."""
        try:
            self.channel.send(msg, fds)
        except OSError:
            raise self._death(what or msg.get("op", "")) from None
        sent = time.monotonic()
        reply = self._receive(timeout_s, max_bytes, what or msg.get("op", ""))
        return reply, time.monotonic() - sent

    def early_request(
        self, msg: dict, timeout_s: float, max_bytes: int = DEFAULT_MAX_FRAME, what: str = "", at_early=None
    ):
        """For a request whose handler sends an early frame (`"early": true`) the moment its work is done, then its
        reply (after the checks every reply gets): (the reply with the early frame's fields, seconds from the end of
        sending to the early frame; `at_early()` is called as that frame arrives). A handler that failed before its
        early frame sends the reply alone."""
        first, seconds = self.timed_request(msg, timeout_s, max_bytes, what)
        if at_early is not None:
            at_early()
        if first.get("early") is not True:
            return first, seconds
        reply = self._receive(timeout_s, max_bytes, what or msg.get("op", ""))
        return {**reply, **{k: v for k, v in first.items() if k not in ("ok", "early")}}, seconds

    def _receive(self, timeout_s: float, max_bytes: int, what: str) -> dict:
        try:
            reply = self.channel.recv(timeout=timeout_s, max_bytes=max_bytes)
        except ChannelTimeout:
            self.kill()
            raise ChildFailure(
                "TIMEOUT", f"{what} did not finish within {timeout_s:.0f} s; the process was killed", self.output.text()
            ) from None
        except ChannelClosed:
            raise self._death(what) from None
        except (FrameTooLarge, ValueError) as exc:
            self.kill()
            raise ChildFailure(
                "CRASHED", f"{what}: the process sent an unusable message ({exc})", self.output.text()
            ) from None
        if not isinstance(reply, dict):
            self.kill()
            raise ChildFailure("CRASHED", f"{what}: the process sent an unusable message", self.output.text())
        return reply

    def _death(self, what: str) -> ChildFailure:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = None
        self._reader.join(timeout=2)
        if self.watchdog is not None and self.watchdog.tripped == "memory":
            return ChildFailure(
                "OUT_OF_MEMORY",
                f"the candidate's process used more than {gib(self.memory_limit_bytes)} of host memory during {what} "
                "and was killed",
                self.output.text(),
            )
        if self.watchdog is not None and self.watchdog.tripped == "processes":
            return ChildFailure(
                "CRASHED",
                f"the candidate's process started more than {MAX_PROCESSES} processes during {what} and was killed",
                self.output.text(),
            )
        if code == EXIT_UNCONFINED and self.cell is not None:
            return ChildFailure(
                "UNCONFINED",
                "--confine strict: the candidate's process could not be confined on this machine, so it ran nothing "
                "(`cudagent doctor` says what this kernel offers; --confine best-effort runs it with what there is)",
                self.output.text(),
            )
        if code == EXIT_NO_JAIL and self.cell is not None:
            return ChildFailure(
                "CRASHED",
                f"the candidate's process could not enter its jail during {what} (the machine's probe found it "
                "working; a limit on namespaces or processes may have been reached)",
                self.output.text(),
            )
        if code == EXIT_CUDA_CONFINED and self.cell is not None:
            return ChildFailure(
                "CRASHED",
                f"CUDA did not start in the candidate's process during {what}; the jail is this machine's (its probe "
                "started CUDA inside it), so this process's start failed on its own",
                self.output.text(),
            )
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            detail = {
                "SIGSEGV": " (segmentation fault)",
                "SIGABRT": " (abort)",
                "SIGKILL": " (killed: out of memory?)",
                "SIGBUS": " (bus error)",
                "SIGFPE": " (arithmetic error)",
            }.get(name, "")
            return ChildFailure(
                "CRASHED", f"the candidate's process died of {name}{detail} during {what}", self.output.text()
            )
        if code == 0:
            return ChildFailure(
                "NO_RESULT",
                f"the candidate's process exited (status 0) during {what} without "
                "sending its result; printed output is never read as a result",
                self.output.text(),
            )
        return ChildFailure(
            "CRASHED", f"the candidate's process exited with status {code} during {what}", self.output.text()
        )

    def harness_pid(self) -> int | None:
        """The candidate's process itself (below its keeper, perhaps in a PID namespace of its own), as this process
        numbers it; None before its hello or once it is gone."""
        if self.proc is None or self.hello_pid is None:
            return None
        return innermost(self.proc.pid, int(self.hello_pid))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float:
        """CPU time the child and everything it started have used so far."""
        return cpu_seconds(process_tree(self.proc.pid)) if self.proc is not None else 0.0

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._end()
            self.proc.wait()

    def _end(self) -> None:
        """Kill everything the process started, then the process itself (its keeper): nothing is left."""
        proc = self.proc
        end_tree(proc.pid, lambda: proc.poll() is not None)

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    self.channel.send({"op": "exit"})
                    self.channel.recv(timeout=10)
                except Exception:
                    pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            # Whatever the child started goes with it (the keeper has seen to that already; this is the belt).
            self._end()
            self.proc.wait()
            if self.proc.stdout:
                self.proc.stdout.close()
        if self.channel is not None:
            self.channel.close()
        if self._host_home:
            shutil.rmtree(self._host_home, ignore_errors=True)
            self._host_home = None
        self.home = None

    def output_tail(self, limit: int = 4000) -> str:
        return self.output.text()[-limit:]


class StartingProcess:
    """A candidate process being started in a thread (starting one waits for the fork server's import)."""

    def __init__(self, start):
        self._process: ChildProcess | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(start,), name="start-candidate-process", daemon=True)
        self._thread.start()

    def _run(self, start) -> None:
        try:
            self._process = start()
        except BaseException as exc:  # noqa: BLE001  (raised again where the process is taken)
            self._error = exc

    def get(self) -> ChildProcess:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._process
