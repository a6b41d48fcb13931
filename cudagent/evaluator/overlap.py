"""An evaluation's cold start overlapped: the CPU's part (the candidate's build, the link audit's once-per-machine
calibration) runs in threads beside the task's check and the baselines instead of after them.

    timeline = Timeline()                        # phase -> [start, end], seconds from the evaluation's start
    quiet = threading.Event()                    # set once no clean measurement is left in this evaluation
    job = Beside("build", build, timeline, room_beside_measurement(device, measuring), quiet)
    with timeline.span("task_check"): ...
    built = job.result()                         # waits; re-raises what the job raised

What a baseline's timing may share the machine with is decided here, in one place:
- nothing of the candidate runs while a baseline is timed. A build only compiles; a build that must import
  model_new.py to find its load_inline calls waits for `quiet` first (the caller passes the gate to that step);
- compiling beside a timing runs only on a CUDA device, whose timings are the device's (CUDA events) and the host's
  enqueue time of small launches, on a host with at least MIN_CORES cores: the job's thread, and every compiler it
  starts, is pinned to all cores but the first RESERVED_CORES (a thread's CPU affinity is inherited by the processes
  it forks), at a lower priority, so the measurement's processes keep whole cores to themselves;
- anywhere else (a CPU device, whose baselines are the CPU's own time; a small host) the job waits for `quiet`
  and runs after the measurement, as before. With nothing left to measure (cached baselines, or no timing), `quiet`
  is set at once and the job runs from the start on every core.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

MIN_CORES = 8  # a host with fewer keeps compiling away from clean measurements
RESERVED_CORES = 4  # kept for the measurement's processes while something compiles beside them
NICE = 10  # the priority a compile beside a measurement runs at


class Timeline:
    """When each phase of one evaluation ran: name -> [start, end] in seconds from the Timeline's creation. Phases
    may overlap; a phase run twice keeps its first start and last end."""

    def __init__(self, start: float | None = None):
        self.start = time.monotonic() if start is None else start
        self.spans: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def now(self) -> float:
        return round(time.monotonic() - self.start, 3)

    def begin(self, name: str) -> None:
        with self._lock:
            self.spans.setdefault(name, [self.now(), self.now()])

    def end(self, name: str) -> None:
        with self._lock:
            self.spans.setdefault(name, [self.now(), self.now()])[1] = self.now()

    @contextlib.contextmanager
    def span(self, name: str):
        self.begin(name)
        try:
            yield
        finally:
            self.end(name)

    def to_dict(self) -> dict[str, list[float]]:
        with self._lock:
            return {k: list(v) for k, v in sorted(self.spans.items(), key=lambda kv: kv[1][0])}


def room_beside_measurement(device_is_cuda: bool, measuring: bool, cores: set[int] | None = None) -> set[int] | None:
    """The cores a compile may use now: all of this process's when nothing is left to measure; while a clean
    measurement is left, on a CUDA device with at least MIN_CORES cores, all but the first RESERVED_CORES; else None
    (wait for the measurement to end)."""
    cores = set(os.sched_getaffinity(0)) if cores is None else set(cores)
    if not measuring:
        return cores
    if not device_is_cuda or len(cores) < MIN_CORES:
        return None
    return set(sorted(cores)[RESERVED_CORES:])


class Beside:
    """Run `fn()` in a thread now, recorded as phase `name` on `timeline`: on `cores` at a lower priority when
    they are fewer than the process's, or, with `cores` None, once `quiet` is set (on every core)."""

    def __init__(self, name: str, fn, timeline: Timeline, cores: set[int] | None, quiet: threading.Event):
        self.name, self._fn, self._timeline, self._cores, self._quiet = name, fn, timeline, cores, quiet
        self._value = self._error = None
        self._thread = threading.Thread(target=self._run, name=f"beside-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if self._cores is None:
                self._quiet.wait()
            elif self._cores != set(os.sched_getaffinity(0)):
                os.sched_setaffinity(0, self._cores)  # this thread only (Linux); what it forks inherits it
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
            with self._timeline.span(self.name):
                self._value = self._fn()
        except BaseException as exc:  # noqa: BLE001  (handed to whoever asks for the result)
            self._error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
