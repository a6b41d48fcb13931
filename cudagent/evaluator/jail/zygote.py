"""A fork server for candidate processes: children start in milliseconds instead of the seconds `import torch` takes.

    python -s -m cudagent.evaluator.jail.zygote --fd N

The zygote is trusted and runs no candidate code: it imports torch and the child harness, never initializes CUDA
(so a fork is safe), and forks one fresh child per request. On a CPU-only build of torch it also opens one empty
profiler session first: a process's first session costs about a second of CPU (Kineto's set-up), and every child
would pay it again (runtime_audit.warm_profiler); a forked child's first then takes milliseconds. On a CUDA build it
opens none: there a session sets CUPTI up even for CPU activities only, and the zygote's children then failed to
start on the H100. Each child leaves the zygote's session, takes the environment, working directory and output
pipe its request names, and becomes an ordinary `child.py` harness through entry.py (its keeper, its confinement).
For candidates the zygote itself runs in the jail (bubblewrap, cell.py's view): the pids it reports are its
namespace's, and the parent finds the same processes under its own numbering (procs.outer_pid).

Protocol on the SOCK_SEQPACKET socket N, one message per packet, JSON:
    parent -> zygote   {"env": {...}, "cwd": "...", "argv": [...]}  with two descriptors attached: the child's
                       channel socket and the write end of its output pipe
    zygote -> parent   {"pid": P}                                  the child is running
                       {"exit": P, "code": C}                      it ended (C as subprocess reports it: -signal)
The zygote exits when the parent closes its end.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from cudagent.procs import BoundedOutput, drain, end_tree, kill_group, outer_pid, popen_lasting

MAX_PACKET = 1 << 20
REAP_PERIOD_S = 0.05


# ----- the zygote process --------------------------------------------------------------------------------------


def serve(sock: socket.socket) -> None:
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([sock], [], [], REAP_PERIOD_S)
        _reap(sock, children)
        if not ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, MAX_PACKET, 2)
        if not data:
            return
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            _become_child(sock, request, fds)
        for fd in fds:
            os.close(fd)
        children.add(pid)
        sock.send(json.dumps({"pid": pid}).encode())


def _reap(sock: socket.socket, children: set[int]) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0
        if done:
            children.discard(pid)
            sock.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _become_child(sock: socket.socket, request: dict, fds: list[int]) -> None:
    status = 70
    try:
        channel_fd, output_fd = fds
        sock.close()
        os.setsid()
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        os.close(output_fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # TMPDIR may differ from the zygote's
        import cudagent.evaluator.jail.entry as entry

        entry.run_child([*request["argv"], "--fd", str(channel_fd)])  # confines it, then ends the process itself
    except BaseException:  # noqa: BLE001  (whatever happens, this process must never return into the zygote)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def main() -> None:
    parser = argparse.ArgumentParser(prog="cudagent.evaluator.jail.zygote")
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args()
    import torch  # noqa: F401  (the point of the zygote: imported once, shared by every fork)

    import cudagent.evaluator.child  # noqa: F401
    import cudagent.evaluator.jail.privileges as isolation
    from cudagent.evaluator.audit.runtime_audit import warm_profiler

    if _cpu_only_torch():
        warm_profiler(cuda=False)

    isolation.protect_this_process()  # its children are the candidates' processes: closed to them too

    sock = socket.socket(fileno=args.fd)
    sock.send(json.dumps({"ready": os.getpid()}).encode())
    serve(sock)
    os._exit(0)


def _cpu_only_torch() -> bool:
    """Whether this torch was built without CUDA or ROCm (a profiler session then sets up no device library)."""
    import torch

    return torch.version.cuda is None and getattr(torch.version, "hip", None) is None


# ----- the parent's side ---------------------------------------------------------------------------------------


class ZygoteGone(Exception):
    """The zygote died or never started; the caller starts its child the ordinary way."""


class ForkedProcess:
    """The part of subprocess.Popen that ChildProcess uses, for a child the zygote forked: `pid` as this process
    sees it, `inner` as the zygote does (they differ when the zygote runs in a jail's PID namespace)."""

    def __init__(self, zygote: Zygote, pid: int, inner: int, stdout):
        self.zygote, self.pid, self.inner, self.stdout = zygote, pid, inner, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.inner, timeout_s=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.inner, timeout_s=timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
        return self.returncode

    def kill(self) -> None:
        """Everything below the child's keeper first, then the keeper, once it has ended what came back to it."""
        end_tree(self.pid, lambda: self.poll() is not None)


class Zygote:
    """The parent's handle: start it, fork children from it, learn how they ended, close it."""

    def __init__(self, env: dict[str, str], cwd: str, start_timeout_s: float = 180.0, view=None):
        """env and cwd: the zygote's own (sanitized, like a child's); each child gets its own from its request.
        view: the jail (bwrap.View) the zygote, and so every child it forks, runs in; None: none."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.output = BoundedOutput(head=4096, tail=16384)
        command = [sys.executable, "-s", "-m", "cudagent.evaluator.jail.zygote", "--fd", str(theirs.fileno())]
        self.jailed = view is not None
        self.proc = popen_lasting(  # it dies with its parent: started from a thread that lasts
            view.argv(command) if view is not None else command,
            pass_fds=(theirs.fileno(),),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        theirs.close()
        drain(self.proc.stdout, self.output)
        self.sock = ours
        self.start_timeout_s = start_timeout_s
        self._codes: dict[int, int] = {}
        self._pids: list[int] = []
        self._cond = threading.Condition()
        self._spawn_lock = threading.Lock()
        self._ready = False
        self._gone = False
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        try:
            while True:
                data = self.sock.recv(MAX_PACKET)
                if not data:
                    break
                msg = json.loads(data)
                with self._cond:
                    if "ready" in msg:
                        self._ready = True
                    elif "pid" in msg:
                        self._pids.append(msg["pid"])
                    elif "exit" in msg:
                        self._codes[msg["exit"]] = msg["code"]
                    self._cond.notify_all()
        except (OSError, ValueError):
            pass
        with self._cond:
            self._gone = True
            self._cond.notify_all()

    def wait_ready(self) -> bool:
        """Wait until the zygote has imported what its children share (or died): whether it is ready."""
        with self._cond:
            return self._cond.wait_for(lambda: self._ready or self._gone, timeout=self.start_timeout_s) and self._ready

    def alive(self) -> bool:
        return not self._gone and self.proc.poll() is None

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, channel_fd: int) -> ForkedProcess:
        """Fork a child that runs `child.py` with argv (plus --fd); its output comes back through a pipe."""
        with self._spawn_lock:
            with self._cond:
                if not self._cond.wait_for(lambda: self._ready or self._gone, timeout=self.start_timeout_s):
                    raise ZygoteGone("the zygote did not start in time")
                if self._gone:
                    raise ZygoteGone("the zygote is gone")
            read_fd, write_fd = os.pipe()
            try:
                request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
                socket.send_fds(self.sock, [request], [channel_fd, write_fd])
            except OSError as exc:
                os.close(read_fd)
                raise ZygoteGone(f"the zygote is gone ({exc})") from None
            finally:
                os.close(write_fd)
            with self._cond:
                if not self._cond.wait_for(lambda: self._pids or self._gone, timeout=30):
                    os.close(read_fd)
                    raise ZygoteGone("the zygote did not answer")
                if not self._pids:
                    os.close(read_fd)
                    raise ZygoteGone("the zygote is gone")
                inner = self._pids.pop(0)
        pid = outer_pid(self.proc.pid, inner) if self.jailed else inner
        if pid is None:
            os.close(read_fd)
            raise ZygoteGone(f"the zygote's child {inner} is nowhere to be seen")
        return ForkedProcess(self, pid, inner, os.fdopen(read_fd, "rb"))

    def exit_code(self, pid: int, timeout_s: float | None) -> int | None:
        """How the child ended, waiting up to timeout_s (None: for ever); None if it is still running."""
        with self._cond:
            self._cond.wait_for(lambda: pid in self._codes or self._gone, timeout=timeout_s)
            if pid in self._codes:
                return self._codes.pop(pid)
        if not self._gone:
            return None
        if self.jailed:  # the jail's PID namespace ends with the zygote's bubblewrap, and every child in it
            try:
                self.proc.wait(timeout=10.0 if timeout_s is None else timeout_s)
                return -signal.SIGKILL
            except subprocess.TimeoutExpired:
                return None
        # Nobody reaps it for us now: alive or not is all we can learn (and a zombie nobody reaps stays "alive"
        # for ever, hence the bound).
        deadline = time.monotonic() + (10.0 if timeout_s is None else timeout_s)
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return -signal.SIGKILL
            if time.monotonic() >= deadline:
                return None if timeout_s is not None else -signal.SIGKILL
            time.sleep(0.05)

    def close(self) -> None:
        # shutdown first: closing alone leaves the socket open while the listening thread is blocked in recv() on it,
        # so the zygote saw no end of its parent and every close waited out the timeout below (5 s an evaluator)
        for end in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            try:
                end()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


if __name__ == "__main__":
    main()
