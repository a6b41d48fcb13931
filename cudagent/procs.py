"""Running other programs: each in its own process group, killed whole on timeout, with bounded output.

A program that prints hundreds of megabytes or never ends must cost us neither memory nor the run: output is
kept as a head and a tail, and a timeout kills the program's whole process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

HEAD_BYTES = 64 * 1024
TAIL_BYTES = 192 * 1024


class BoundedOutput:
    """Keeps the first HEAD and the last TAIL bytes of a stream, and counts what was dropped between."""

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES):
        self.head_limit, self.tail_limit = head, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        if len(self.tail) > self.tail_limit:
            cut = len(self.tail) - self.tail_limit
            self.dropped += cut
            del self.tail[:cut]

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes of output omitted ...]\n".encode() if self.dropped else b""
        return (bytes(self.head) + middle + bytes(self.tail)).decode("utf-8", errors="replace")


def drain(stream, sink: BoundedOutput) -> threading.Thread:
    """Read a pipe to its end in a daemon thread, feeding `sink`."""

    def pump():
        try:
            while True:
                chunk = os.read(stream.fileno(), 65536)
                if not chunk:
                    break
                sink.feed(chunk)
        except OSError:
            pass

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group a child leads (children are started with start_new_session=True)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


@dataclass
class ProcResult:
    returncode: int | None
    output: str
    timed_out: bool
    seconds: float


def run_bounded(
    cmd: list[str],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    stdin_data: bytes | None = None,
) -> ProcResult:
    """Run `cmd` with stdout and stderr merged and bounded; kill its process group at `timeout_s`."""
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    sink = BoundedOutput()
    reader = drain(proc.stdout, sink)
    if stdin_data is not None:
        try:
            proc.stdin.write(stdin_data)
            proc.stdin.close()
        except BrokenPipeError:
            pass
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        proc.wait()
    except BaseException:  # Ctrl-C or a kill of ours: take the program's whole group with us
        kill_group(proc)
        raise
    else:
        # The leader is gone; anything it left behind in its group goes too.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    reader.join(timeout=5)
    proc.stdout.close()
    return ProcResult(None if timed_out else proc.returncode, sink.text(), timed_out, time.monotonic() - start)
