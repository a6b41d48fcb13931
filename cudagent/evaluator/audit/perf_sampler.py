"""perf_event sampling of another process's program counters, from the trusted side (attribution.py reads it).

    with Sampler(pid) as sampler:        a task-clock event on every thread `pid` has, sampling user space only
        ...; sampler.stop()              the moment what is measured is done
    sampler.ips, sampler.maps            the program counters, and the process's executable mappings after
    sampler.thread_s, .residual_s, ...   what the samples account for, and what they do not

Every thread the process has when sampling starts gets a PERF_COUNT_SW_TASK_CLOCK event with a sample each
SAMPLE_PERIOD_NS of its CPU time; the sampled process neither arms nor sees it. The ring buffers are read every
DRAIN_S while the events run, so a long batch loses nothing; a buffer found full (this process kept from reading it
for a whole buffer's worth) says how much its thread ran unseen (`lost_s`). What the samples cannot say is counted
to the nanosecond: each event's count (its thread's CPU time while enabled), the time of threads born meanwhile
(`residual_s`), and the other processes it started.

Threads born meanwhile are what the process's CPU clock (every thread, ended ones too) gained beyond what the listed
threads' scheduler clocks (/proc/<pid>/task/<tid>/schedstat) gained: the same clock of the scheduler on both sides, so
neither a running thread's time not yet taken in at a tick nor the scheduler's own way of counting a context switch
shows as a thread nobody listed. (Against the events' counts it did: a thread that blocks on a full pipe hundreds of
times a call showed a few microseconds a switch beyond its count, tens of milliseconds over an evaluation, and a
candidate that only printed was judged to work in a thread it never started.)
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
import threading
import time

from cudagent.procs import cpu_seconds, process_tree

SAMPLE_PERIOD_NS = 250_000  # a sample each quarter millisecond of a thread's CPU time
_SYSCALL = {"x86_64": 298, "aarch64": 241}
_PAGES = 64  # data pages of each thread's ring buffer (256 KB: about 10,000 samples)
_PERF_TYPE_SOFTWARE, _PERF_COUNT_SW_TASK_CLOCK = 1, 1
_PERF_SAMPLE_IP, _PERF_SAMPLE_TID = 1, 2
_FLAG_DISABLED, _FLAG_EXCLUDE_KERNEL, _FLAG_EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6
_IOC_ENABLE, _IOC_DISABLE = 0x2400, 0x2401
_RECORD_LOST, _RECORD_SAMPLE = 2, 9
_ROOM = 64  # bytes: a ring buffer with less free room than this could not take the next record
DRAIN_S = 0.02  # how often the ring buffers are read while sampling (each holds 2.7 s of one thread's samples)


class _Attr(ctypes.Structure):  # struct perf_event_attr, PERF_ATTR_SIZE_VER5
    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
        ("branch_sample_type", ctypes.c_uint64),
        ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64),
        ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16),
        ("reserved", ctypes.c_uint16),
    ]


class Unavailable(Exception):
    """This machine does not let this process sample the candidate's (perf_event_open refused)."""


class Sampler:
    """Samples the program counters of every thread of process `pid` while enabled (see the module's note), and
    counts what the sampling did not list: each sampled thread's task clock and the whole process's CPU clock are
    read to the nanosecond (a tick-counted user time drifts from the samples by more than a small task's work on a
    loaded machine), and the CPU time of the other processes it started."""

    def __init__(self, pid: int):
        self.pid = pid
        self.events: list[tuple[int, mmap.mmap]] = []
        self.ips: list[int] = []
        self.lost = 0  # samples the kernel dropped (PERF_RECORD_LOST)
        self.maps: list = []
        self.stopped = False
        self._tails: list[int] = []  # where each ring buffer was read up to
        self._stop_drain = threading.Event()
        self._drainer: threading.Thread | None = None
        self._before = (0, 0.0)  # (the process's CPU clock in ns, its children's CPU seconds) when enabled
        self._sched_before: dict[int, int] = {}  # each listed thread's scheduler clock (ns) when enabled
        self._sched_after: dict[int, int] = {}  # ... when disabled; a thread that ended meanwhile is missing
        self._window_s = 0.0  # wall time between reading the clocks and enabling (or disabling) every event
        self.process_ns = self.thread_ns = 0  # while enabled: the process's CPU time, its sampled threads' (summed)
        self.children_s = 0.0  # what the other processes it started used meanwhile
        # after leaving, in seconds: samples read, samples dropped, the sampled threads' CPU time, the time of threads
        # not sampled, and the sampled threads' time in the kernel
        self.sampled_s = self.lost_s = self.thread_s = self.residual_s = self.kernel_s = 0.0
        self._tids: list[int] = []  # the threads sampled, one for each event

    def __enter__(self) -> Sampler:
        nr = _SYSCALL.get(platform.machine())
        if nr is None:
            raise Unavailable(f"no perf_event_open for {platform.machine()}")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        attr = _Attr(
            type=_PERF_TYPE_SOFTWARE,
            size=ctypes.sizeof(_Attr),
            config=_PERF_COUNT_SW_TASK_CLOCK,
            sample_period=SAMPLE_PERIOD_NS,
            sample_type=_PERF_SAMPLE_IP | _PERF_SAMPLE_TID,
            flags=_FLAG_DISABLED | _FLAG_EXCLUDE_KERNEL | _FLAG_EXCLUDE_HV,
        )
        try:
            for tid in sorted(int(t) for t in os.listdir(f"/proc/{self.pid}/task")):
                fd = libc.syscall(ctypes.c_long(nr), ctypes.byref(attr), tid, -1, -1, ctypes.c_ulong(0))
                if fd < 0:
                    err = ctypes.get_errno()
                    if err == 3:  # ESRCH: a thread that ended meanwhile
                        continue
                    raise Unavailable(f"perf_event_open refused ({os.strerror(err)})")
                buf = mmap.mmap(fd, (1 + _PAGES) * mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                self.events.append((fd, buf))
                self._tids.append(tid)
            children_s = self._children_s()
        except (OSError, Unavailable):
            self._close()
            raise
        if not self.events:
            raise Unavailable("the process has no thread left to sample")
        import fcntl

        t0 = time.monotonic()  # the window: from the process clock's reading to the last event switched on
        try:
            self._before = (_process_cpu_ns(self.pid), children_s)
        except OSError as exc:
            self._close()
            raise Unavailable(f"the process's CPU clock cannot be read ({exc})") from None
        self._sched_before = _scheduler_ns(self.pid, self._tids)
        if not self._sched_before and os.path.exists(f"/proc/{self.pid}"):
            self._close()
            raise Unavailable("this kernel keeps no scheduler clock per thread (/proc/<pid>/task/<tid>/schedstat)")
        for fd, _ in self.events:
            fcntl.ioctl(fd, _IOC_ENABLE, 0)
        self._window_s = time.monotonic() - t0
        self._tails = [0] * len(self.events)
        self._sampled = [0] * len(self.events)  # samples read from each ring buffer
        self._full = [False] * len(self.events)  # a ring buffer found with no room left: samples were dropped
        self._counts: list[int] = []
        self._drainer = threading.Thread(target=self._drain_while_sampling, daemon=True)
        self._drainer.start()
        return self

    def _drain_while_sampling(self) -> None:
        """Read the ring buffers as they fill, so that a long batch's samples are not dropped for want of room."""
        while not self._stop_drain.wait(DRAIN_S):
            self._drain()

    def _drain(self) -> None:
        for i, (_, buf) in enumerate(self.events):
            before = len(self.ips)
            self._tails[i], full = _read_records(buf, self._tails[i], self.ips, self)
            self._sampled[i] += len(self.ips) - before
            self._full[i] = self._full[i] or full

    def stop(self) -> None:
        """Stop sampling (once; what came after is not the calls'); the samples are read on leaving."""
        import fcntl

        if self.stopped:
            return
        self.stopped = True
        self._stop_drain.set()
        t0 = time.monotonic()
        for fd, _ in self.events:
            try:
                fcntl.ioctl(fd, _IOC_DISABLE, 0)
            except OSError:
                pass
        try:
            process_ns = _process_cpu_ns(self.pid)
        except OSError:  # the process is gone: the batch failed, and nothing here is judged
            process_ns = self._before[0]
        self._sched_after = _scheduler_ns(self.pid, self._tids)
        self._window_s += time.monotonic() - t0
        self.process_ns = max(0, process_ns - self._before[0])
        self.children_s = max(0.0, self._children_s() - self._before[1])
        self._counts = [_count(fd) for fd, _ in self.events]
        self.thread_ns = sum(self._counts)

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._drainer is not None:
            self._drainer.join()
        self._drain()
        self.maps = code_maps(self.pid)
        self._account()
        self._close()

    def _account(self) -> None:
        period = SAMPLE_PERIOD_NS / 1e9
        self.sampled_s = len(self.ips) * period
        # what a full ring buffer's thread ran beyond its samples was not seen (the kernel's own time is in it too:
        # a buffer is full only when this process was kept from reading it for a whole buffer's worth)
        self.lost_s = self.lost * period + sum(
            max(0.0, count / 1e9 - n * period)
            for count, n, full in zip(self._counts, self._sampled, self._full)
            if full
        )
        self.thread_s = self.thread_ns / 1e9
        # the listed threads' time by the scheduler's clock, the one the process clock sums; a listed thread that
        # ended meanwhile by its event's count (the scheduler's clock of an ended thread is only in the process's)
        listed_ns = 0
        for tid, count in zip(self._tids, self._counts):
            if tid not in self._sched_before:
                continue  # ended before it was read: its time is not in the process clock's gain either
            after = self._sched_after.get(tid)
            listed_ns += after - self._sched_before[tid] if after is not None else count
        # a listed thread's clock may move between the readings of the process's and its own: at most the windows'
        # wall time each, and either sign (the slack goes to the candidate)
        slack = (len(self.events) + 1) * self._window_s
        self.residual_s = (self.process_ns - listed_ns) / 1e9 - slack
        self.kernel_s = max(0.0, self.thread_s - self.sampled_s - self.lost_s)

    def _children_s(self) -> float:
        return cpu_seconds([p for p in process_tree(self.pid) if p != self.pid])

    def _close(self) -> None:
        for fd, buf in self.events:
            buf.close()
            os.close(fd)
        self.events = []


def _process_cpu_ns(pid: int) -> int:
    """The CPU time of process `pid` (every thread, ended ones included, user and kernel) in nanoseconds: its
    process CPU clock (clock_getcpuclockid's, CPUCLOCK_SCHED), which the kernel lets any process read."""
    return time.clock_gettime_ns(((~pid) << 3) | 2)


def _scheduler_ns(pid: int, tids: list[int]) -> dict[int, int]:
    """Each of the threads `tids` of process `pid` by its scheduler clock in nanoseconds (the first field of its
    schedstat: the sum the process's CPU clock adds up, not brought up to date for a thread running now, as that
    clock's is not); a thread that has ended is missing."""
    clocks = {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                clocks[tid] = int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return clocks


def _count(fd: int) -> int:
    """A task-clock event's count: the nanoseconds its thread ran while the event was enabled (user and kernel)."""
    try:
        data = os.read(fd, 8)
    except OSError:
        return 0
    return struct.unpack("<Q", data)[0] if len(data) == 8 else 0


def _read_records(buf: mmap.mmap, tail: int, ips: list[int], counts) -> tuple[int, bool]:
    """Append the instruction pointers of the records in one ring buffer from `tail` to its head (PERF_RECORD_SAMPLE:
    ip, pid, tid), add the samples the kernel dropped (PERF_RECORD_LOST: id, lost) to `counts.lost`, and hand the
    room back to the kernel (data_tail); returns the new tail, and whether the buffer was full (records dropped)."""
    head = struct.unpack_from("<Q", buf, 1024)[0]  # data_head, then the records it covers (read after it)
    data_offset, data_size = struct.unpack_from("<QQ", buf, 1040)
    if not data_size:  # kernels before 4.1 have no data_offset/data_size: the data follows the first page
        data_offset, data_size = mmap.PAGESIZE, _PAGES * mmap.PAGESIZE
    pos = tail
    while pos + 8 <= head:
        rtype, _misc, size = _header(buf, data_offset, data_size, pos)
        if size == 0:
            break
        if rtype == _RECORD_SAMPLE and size >= 24:
            ip, pid = struct.unpack("<QI", _read(buf, data_offset, data_size, pos + 8, 12))
            if pid == counts.pid:
                ips.append(ip)
        elif rtype == _RECORD_LOST and size >= 24:
            counts.lost += struct.unpack("<Q", _read(buf, data_offset, data_size, pos + 16, 8))[0]
        pos += size
    struct.pack_into("<Q", buf, 1032, pos)  # data_tail: the kernel may write over what was read
    return pos, head - tail > data_size - _ROOM


def _header(buf, offset: int, size: int, pos: int) -> tuple[int, int, int]:
    return struct.unpack("<IHH", _read(buf, offset, size, pos, 8))


def _read(buf, offset: int, size: int, pos: int, n: int) -> bytes:
    i = pos % size
    if i + n <= size:
        return buf[offset + i : offset + i + n]
    return buf[offset + i : offset + size] + buf[offset : offset + (i + n - size)]


def code_maps(pid: int) -> list[tuple[int, int, str | None, tuple, int]]:
    """The executable mappings of the process: (start, end, file or None, (device major, minor, inode), offset in
    the file)."""
    maps = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) < 5 or "x" not in parts[1]:
                    continue
                start, end = (int(x, 16) for x in parts[0].split("-"))
                major, minor = (int(x, 16) for x in parts[3].split(":"))
                path = parts[5].strip() if len(parts) == 6 else ""
                path = path if path.startswith(("/", "[v")) else None
                maps.append((start, end, path, (major, minor, int(parts[4])), int(parts[2], 16)))
    except (OSError, ValueError):
        pass
    return maps
