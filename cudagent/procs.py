"""Running other programs: each in its own process group, killed whole on timeout, with bounded output.

A program that prints hundreds of megabytes or never ends must cost us neither memory nor the run: output is
kept as a head and a tail, and a timeout kills the program's whole process tree. The program runs under a reaper
(reaper.py): whatever it leaves running when it ends, in its group or out of it, is killed then. Optional Limits
bound the memory and the number of processes of the program's whole tree (a watchdog that kills it) and the size of
any file it writes (RLIMIT_FSIZE, set before the program starts).

A little over 400 lines in one module: starting, watching and ending a process tree read the same /proc facts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

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


_LASTING = None  # the thread every jailed process is started from (popen_lasting)


def popen_lasting(*args, **kwargs) -> subprocess.Popen:
    """subprocess.Popen from a thread that lives as long as this process. A process that must die with its parent
    (bubblewrap's --die-with-parent, a keeper's PR_SET_PDEATHSIG) is told when the *thread* that started it ends:
    started from a worker thread that finishes (a baseline prepared beside the task's check), it would be killed
    then, in the middle of its work."""
    global _LASTING
    from concurrent.futures import ThreadPoolExecutor

    if _LASTING is None:
        _LASTING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cudagent-spawner")
    return _LASTING.submit(subprocess.Popen, *args, **kwargs).result()


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL everything below the child (what left its group with setsid too), then the child's group: a reaper
    at the top (reaper.py) keeps what leaves its parent in the tree until the tree is gone."""
    for _ in range(100):
        below = process_tree(proc.pid)[1:]
        if not below:
            break
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)
    kill_group(proc)


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


@dataclass(frozen=True)
class Limits:
    """What one program and everything it starts may use; None: no limit."""

    memory_bytes: int | None = None  # resident memory of the whole process tree
    max_processes: int | None = None  # processes alive at once in the tree
    max_file_bytes: int | None = None  # the largest file it may write

    def argv_prefix(self) -> list[str]:
        """A command prefix (reaper.py) that sets the file-size limit in the program itself (no preexec_fn: our
        parent has threads) and ends whatever the program leaves behind when it ends."""
        size = -1 if self.max_file_bytes is None else self.max_file_bytes
        return [sys.executable, "-S", str(Path(__file__).with_name("reaper.py")), str(size), "--"]


class Watchdog:
    """Polls a process tree (the root, its descendants and its session) and kills the group at a limit."""

    def __init__(self, proc: subprocess.Popen, limits: Limits, period_s: float = 0.1):
        self.proc, self.limits, self.period_s = proc, limits, period_s
        self.tripped: str | None = None  # "memory" or "processes"
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        if limits.memory_bytes is not None or limits.max_processes is not None:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _watch(self) -> None:
        while not self._stop.wait(self.period_s):
            pids = process_tree(self.proc.pid)
            if not pids:
                return
            rss = sum(resident_bytes(p) for p in pids)
            self.peak_bytes = max(self.peak_bytes, rss)
            if self.limits.memory_bytes is not None and rss > self.limits.memory_bytes:
                self.tripped = "memory"
            elif self.limits.max_processes is not None and len(pids) > self.limits.max_processes:
                self.tripped = "processes"
            if self.tripped:
                kill_tree(self.proc)  # descendants that left the group (setsid) go too
                return

    def message(self) -> str:
        if self.tripped == "memory":
            return f"used more than {gib(self.limits.memory_bytes)} of memory and was killed"
        if self.tripped == "processes":
            return f"started more than {self.limits.max_processes} processes and was killed"
        return ""


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (index 0 is the state, field 3 of proc(5)); None when the
    process is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str:
    """When the process started, in clock ticks since boot (field 22 of proc(5)); "" where unknown. With the pid it
    names one process for good: a pid handed on to a later process comes with another start time."""
    fields = stat_fields(pid)
    return fields[19].decode() if fields and len(fields) > 19 else ""


def process_tree(root: int) -> list[int]:
    """The live processes descending from `root` or sharing its session, `root` first."""
    parents: dict[int, int] = {}
    sessions: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = stat_fields(entry.name)
        if fields is None or fields[0] == b"Z":
            continue
        pid = int(entry.name)
        parents[pid], sessions[pid] = int(fields[1]), int(fields[3])
    if root not in parents:
        return []
    tree = [root]
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    i = 0
    while i < len(tree):
        tree.extend(children.get(tree[i], ()))
        i += 1
    seen = set(tree)
    tree.extend(p for p, sid in sessions.items() if sid == root and p not in seen)
    return tree


def namespace_pids(pid: int) -> list[int]:
    """The process's id in each PID namespace it belongs to, outermost first (NSpid in /proc/PID/status); [] when it
    is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return [int(x) for x in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def outer_pid(root: int, inner: int, timeout_s: float = 5.0) -> int | None:
    """The id, in this process's PID namespace, of the process below `root` whose id is `inner` in the namespace
    just below ours (a jail's): what a fork server inside a jail reports of the processes it forks."""
    deadline = time.monotonic() + timeout_s
    while True:
        for pid in process_tree(root):
            ids = namespace_pids(pid)
            if len(ids) >= 2 and ids[1] == inner:
                return pid
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def innermost(root: int, pid: int) -> int | None:
    """The process below `root` whose id in its own, innermost PID namespace is `pid` (the id a jailed process
    gives of itself), the most deeply nested one if several are; None when there is none."""
    found = [(len(ids), p) for p in process_tree(root) if (ids := namespace_pids(p)) and ids[-1] == pid]
    return max(found)[1] if found else None


def end_tree(root: int, root_ended, grace_s: float = 10.0) -> None:
    """SIGKILL every process below `root`, then give `root` (a keeper, which ends what comes back to it and then
    itself) `grace_s` to end, as `root_ended()` tells; SIGKILL it after that."""
    for pid in reversed(process_tree(root)[1:]):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    while not root_ended():
        if time.monotonic() >= deadline:
            try:
                os.kill(root, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return
        time.sleep(0.01)


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU time the live processes in `pids` have used so far (all their threads)."""
    total = 0
    for pid in pids:
        fields = stat_fields(pid)
        try:
            total += int(fields[11]) + int(fields[12])
        except (TypeError, IndexError, ValueError):
            continue
    return total / CLOCK_TICKS


def user_seconds(pid: int) -> float:
    """User CPU time process `pid` has used so far (all its threads, ended ones included), to the clock tick."""
    fields = stat_fields(pid)
    try:
        return int(fields[11]) / CLOCK_TICKS
    except (TypeError, IndexError, ValueError):
        return 0.0


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def physical_memory_bytes() -> int:
    return PAGE_BYTES * os.sysconf("SC_PHYS_PAGES")


@dataclass
class ProcResult:
    returncode: int | None
    output: str
    timed_out: bool
    seconds: float
    killed_for: str | None = None  # "memory" or "processes": a Limits watchdog ended it
    limit_message: str = ""


class Cancelled(Exception):
    """The caller cancelled a bounded run; its process group was killed."""


def _wait(proc: subprocess.Popen, timeout_s: float, cancel: threading.Event | None) -> None:
    if cancel is None:
        proc.wait(timeout=timeout_s)
        return
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        try:
            proc.wait(timeout=min(left, 0.05))
            return
        except subprocess.TimeoutExpired:
            if cancel.is_set():
                raise Cancelled() from None


def run_bounded(
    cmd: list[str],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    stdin_data: bytes | None = None,
    limits: Limits | None = None,
    cancel: threading.Event | None = None,
) -> ProcResult:
    """Run `cmd` with stdout and stderr merged and bounded; kill its process group at `timeout_s`, or when it
    passes one of `limits`, or when `cancel` is set (from another thread: then Cancelled is raised)."""
    limits = limits or Limits()
    start = time.monotonic()
    proc = subprocess.Popen(
        limits.argv_prefix() + list(cmd),
        stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    sink = BoundedOutput()
    reader = drain(proc.stdout, sink)
    watchdog = Watchdog(proc, limits)
    if stdin_data is not None:
        try:
            proc.stdin.write(stdin_data)
            proc.stdin.close()
        except BrokenPipeError:
            pass
    timed_out = False
    try:
        _wait(proc, timeout_s, cancel)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_tree(proc)
        proc.wait()
    except BaseException:  # Ctrl-C, a cancel or a kill of ours: take the program's whole tree with us
        watchdog.stop()
        kill_tree(proc)
        raise
    else:
        # The leader is gone; anything it left behind in its group goes too.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    watchdog.stop()
    reader.join(timeout=5)
    proc.stdout.close()
    return ProcResult(
        None if timed_out else proc.returncode,
        sink.text(),
        timed_out,
        time.monotonic() - start,
        killed_for=watchdog.tripped,
        limit_message=watchdog.message(),
    )


def run_in_slots(items: list, slots: list, work) -> None:
    """`work(slot, item)` for every item, one thread per slot (a GPU, a CPU worker), each taking the next item as
    soon as it is free; returns when all are done."""
    import queue

    jobs: queue.Queue = queue.Queue()
    for item in items:
        jobs.put(item)

    def serve(slot) -> None:
        while True:
            try:
                item = jobs.get_nowait()
            except queue.Empty:
                return
            work(slot, item)

    threads = [threading.Thread(target=serve, args=(slot,), daemon=True) for slot in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
