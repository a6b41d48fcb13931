"""The trusted evaluator: static audits, build, trials in a child process, honest timing, verdict.

    audit ┬ task check ─ baselines, peaks, task cost (this thread; no candidate process exists) ┬ link audit ─
          └ build, link-audit calibration, the fork server's import (threads: overlap.py) ──────┘ child: load,
      trials (verify.py), timing and its checks (profile.py), tampering check, tier

The reference lives only here, in the parent: fresh secret seeds for weights and inputs every evaluation, its
outputs computed here, after the candidate's, and never sent anywhere; this process is non-dumpable. Candidate code
runs only in the jail (jail/): every candidate process is kept by a keeper that ends whatever it starts, inside
bubblewrap with a view of its own, under Landlock and seccomp, reading only the hand-in of its evaluation (the
model_new.py that was audited, the libraries the trusted build made and the link audit read) and writing only its
own scratch. The builds run in a jail of their own (jail/compiler.py). How strong the jail is was decided once for
this machine (jail/level.py), never by what a candidate did.

An Evaluator serves one task on one device and keeps a clean reference worker alive for its whole life; use it as a
context manager (or call close()). Several evaluators may share a device (a bench's tasks): what runs on it takes a
share, timings take it alone (device/share.py); an evaluation that ran out of device memory beside others is run
again with the device alone before its verdict counts. Kept in one module of about 755 lines: every step lives
elsewhere; what is here is their order and the life of the processes they run in (zygote, spares), which only make
sense read together.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field

import cudagent.evaluator.audit.attribution as attribution
import cudagent.evaluator.audit.expanded_scan as expanded_scan
import cudagent.evaluator.jail.confine as confine
import cudagent.evaluator.jail.level as jail_level
import cudagent.evaluator.jail.privileges as isolation
from cudagent.device.info import DeviceInfo
from cudagent.device.share import alone, alone_here, device_share
from cudagent.errors import TaskError
from cudagent.evaluator import checked_tasks
from cudagent.evaluator.audit.link_audit import audit_library, baseline_symbols, inspect_library
from cudagent.evaluator.audit.nullcheck import null_candidates
from cudagent.evaluator.audit.sources import audited, read_candidate
from cudagent.evaluator.compare import Tolerance
from cudagent.evaluator.heap import keep_heap
from cudagent.evaluator.jail.cell import Cell, HandIn
from cudagent.evaluator.jail.process import ChildFailure, ChildProcess, StartingProcess, child_env
from cudagent.evaluator.jail.zygote import Zygote
from cudagent.evaluator.judge import Extension
from cudagent.evaluator.overlap import Beside, Timeline, room_beside_measurement
from cudagent.evaluator.task_host import HostedTask
from cudagent.evaluator.timing.baselines import Baselines
from cudagent.evaluator.timing.batch_check import KEEP, BatchCheck
from cudagent.evaluator.timing.measure import Plan, draw_input_sets
from cudagent.evaluator.timing.ncu import ncu_summary
from cudagent.evaluator.timing.parent_clock import CALIBRATION_CALLS, BatchRefused, calls_for, early_request, run_calls
from cudagent.evaluator.timing.peaks import device_peaks, peaks_cached
from cudagent.evaluator.timing.profile import Profiler
from cudagent.evaluator.timing.roofline import TaskCost, task_cost
from cudagent.evaluator.toolchain.candidate import build_candidate
from cudagent.evaluator.toolchain.extension import (
    DEFAULT_BUILD_TIMEOUT_S,
    BuildResult,
    toolchain_for,
    toolchain_paths,
)
from cudagent.evaluator.transforms import InputSpec
from cudagent.evaluator.verdict import TIER_MARGIN, Verdict
from cudagent.evaluator.verify import TrialRunner, load_message
from cudagent.task import Task
from cudagent.workspace import CandidateFormat, Workspace

SPARE_PROCESSES = 2  # with spare_process: started processes kept ready for the next evaluations
# CPU: the candidate's batches run while sampled before the timing until their computing CPU time (its own code and
# other libraries', not the interpreter's or OpenMP's waiting) reaches ATTRIBUTION_CPU_S, or for ATTRIBUTION_MAX_S at
# most (a loaded machine; the timing's batches are sampled too), one sampled batch at least
ATTRIBUTION_CPU_S = 0.25
ATTRIBUTION_MAX_S = 5.0
# What running out of device memory looks like, wherever it happened (the reference, get_inputs, the candidate)
DEVICE_OOM = re.compile(
    r"out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation"
    r"|CUDA_ERROR_OUT_OF_MEMORY",
    re.I,
)


@dataclass
class EvalOptions:
    tolerance: Tolerance = field(default_factory=Tolerance)
    stock_trials: int = 5
    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S
    # Time limit of one forward call in a trial; the first includes lazy initialization (cuBLAS handles...).
    call_timeout_s: float = 120.0
    timing: bool = True
    margin: float = TIER_MARGIN
    compile_mode: str = "default"
    plan: Plan = field(default_factory=Plan)
    # The static audit runs first and rejects early. Tests switch it off to show that each runtime defense holds on
    # its own; nothing a user can reach turns it off.
    audit_static: bool = True
    # Add an Nsight Compute summary of the candidate's kernels (CUDA, correct candidates, timing on).
    ncu: bool = False
    # Host memory the candidate's process tree may hold; None: half the machine's.
    memory_limit_bytes: int | None = None
    # Fork candidate processes from a zygote that has imported torch (zygote.py), and set CUPTI up while the build
    # runs, instead of starting each process anew: on the H100 an iteration is about 5x faster than the naive cycle
    # with it. The CLI turns it off for CUDAGENT_FORK_SERVER=0 (settings.py).
    fork_server: bool = True
    # Told, in a few words, of each phase as it starts (a progress display); never given candidate output.
    on_phase: object = None
    # Keep the next evaluations' processes started (with the fork server): each sets its CUDA context and its
    # profiler up (CUPTI: about 5 s on the H100) while the agent works, instead of in the next verification. Two are
    # kept and the older one is used, so a process has had a whole evaluation to get ready even when evaluations
    # follow each other at once (an agent that edits and checks back to back). None has loaded candidate code; each
    # evaluation still runs in a process of its own. For one agent working on the machine (`cudagent optimize`); off
    # by default, since every open evaluator then holds processes with CUDA contexts (a service with many sessions,
    # a bench of one evaluation per task).
    spare_process: bool = False
    # Confinement of every process that runs candidate code (confine.py): strict (refuse to run unconfined),
    # best-effort (what the kernel offers, reported in the verdict) or off. The CLI reads CUDAGENT_CONFINE / --confine.
    confine: str = confine.DEFAULT_LEVEL
    # The task's code is not trusted (a `cudagent serve` client's): it runs only in the jail, never in this process
    # (task_host.py); its baselines are timed there too.
    host_task: bool = False

    @classmethod
    def from_settings(cls, settings, **fields) -> EvalOptions:
        """The options the environment settles (settings.Settings: fork server, confinement), and `fields`."""
        return cls(fork_server=settings.fork_server, confine=settings.confine, **fields)


class Evaluator:
    """Evaluates candidates for one task on one device. Validates the task once (`validate`, or the first evaluation
    of a candidate the static audit lets through)."""

    def __init__(
        self,
        task: Task,
        device: DeviceInfo,
        options: EvalOptions | None = None,
        null_candidates: list[str] | None = None,
    ):
        """null_candidates: the task's null-candidate check if the caller already ran it (bench does)."""
        self.options = options or EvalOptions()
        if self.options.host_task:
            task = HostedTask(task, device.kind, self.cell, self.options.memory_limit_bytes)
        self.task, self.device = task, device
        if device.kind == "cpu":
            keep_heap()  # heap.py: its inputs, the reference's calls and the comparisons run in this process
        self._validated = False
        isolation.protect_this_process()
        self._nulls = null_candidates
        self._link_baseline: frozenset[str] | None = None
        self._calibration: Beside | None = None  # the link audit's baseline, being made beside the first evaluation
        self._zygote_lock = threading.Lock()  # the build's import of model_new.py may start it from its thread
        jail = self.cell if self.options.host_task else None
        self.baselines = Baselines(self.task, device, self.options.compile_mode, self.options.plan, jail)
        self._peaks = None
        self._cost = None
        self._work: attribution.Work | None = None  # what the reference's calls cost, in CPU time (audit/attribution)
        self._zygote: Zygote | None = None
        self._zygote_home: str | None = None
        self._spares: collections.deque[ChildProcess] = collections.deque()  # oldest first
        self._starting: StartingProcess | None = None  # started before the task check (_start_early)
        self._cell: Cell | None = None  # the jail of this evaluator's candidates (made on first use)
        self._validated_alone: str | None = None  # why the task's check ran again with the device alone

    def validate(self) -> None:
        """Check the task once (it loads, runs, is deterministic: task.validate_task); a broken one raises TaskError.
        The first evaluation does it after the static audit; a caller that must fail early calls it first. A task
        that ran out of device memory beside other work is checked again with the device alone."""
        if self._validated:
            return
        if self._nulls is None and (known := self._recalled_check()) is not None:
            self._validated, self._nulls = True, known
            return
        try:
            with device_share(exclusive=False):
                self.task.validate(self.device.kind)
        except TaskError as exc:
            if not self._out_of_memory_beside_others(str(exc)):
                raise
            with alone_here(), device_share(exclusive=True):
                self.task.validate(self.device.kind)
            self._validated_alone = _short(str(exc), 300)
        self._validated = True

    def _recalled_check(self) -> list[str] | None:
        """The null candidates of this task's passed check on this machine (checked_tasks.py); None if there is none
        to trust: never for a client's task, whose code may not behave the same way twice."""
        if self.options.host_task:
            return None
        return checked_tasks.recall(self.task, self.device, self.options.tolerance)

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._calibration is not None:  # a calibration still compiling ends (and is kept for the machine)
            with contextlib.suppress(Exception):
                self._calibration.result()
        self.baselines.close()
        self._adopt_starting()
        while self._spares:
            self._spares.popleft().close()
        self._close_zygote()
        self.task.close()
        if self._cell is not None:
            self._cell.close()
            self._cell = None

    def cell(self) -> Cell:
        """The jail of this evaluator's candidates: the machine's (decided once per process by a trusted probe;
        raises confine.Unconfined under strict where the machine cannot give it) and the folder of hand-ins."""
        if self._cell is None:
            jail = jail_level.decide(self.options.confine, self.device.kind)
            self._cell = Cell(jail, self.device.kind, toolchain_paths(toolchain_for(self.device)))
        return self._cell

    def _fork_server(self) -> Zygote | None:
        """The zygote candidate processes fork from, started on first use (after the first baselines, so its import
        never overlaps a clean measurement) and restarted if it died. It lives in the candidates' jail."""
        if not self.options.fork_server:
            return None
        with self._zygote_lock:
            return self._zygote_started()

    def _zygote_started(self) -> Zygote:
        if self._zygote is None or not self._zygote.alive():
            self._close_zygote()
            view = self.cell().view()
            self._zygote_home = tempfile.mkdtemp(prefix="cudagent-zygote-")
            home = "/tmp" if view is not None else self._zygote_home
            self._zygote = Zygote(child_env(home), self._zygote_home, view=view)
        return self._zygote

    def _close_zygote(self) -> None:
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        if self._zygote_home is not None:
            shutil.rmtree(self._zygote_home, ignore_errors=True)
            self._zygote_home = None

    # ----- build ------------------------------------------------------------------------------------------------

    def build(self, ws: Workspace, handin: HandIn | None = None, quiet: threading.Event | None = None) -> BuildResult:
        """Build the candidate in the build's jail (build/candidate.py); with a hand-in, put what was built into
        it. A single-file candidate whose load_inline calls only running it would tell is imported, jailed, to
        find them: once `quiet` is set (no clean measurement left), since that runs candidate code."""
        own = handin is None
        if own:
            handin = self.cell().handin()
            handin.put("model_new.py", read_candidate(ws) or "")
        try:

            def find_calls(h: HandIn):
                if quiet is not None:
                    quiet.wait()
                return self._wanted_calls(h)

            return build_candidate(ws, handin, self.device, self.cell().jail, self.options.build_timeout_s, find_calls)
        finally:
            if own:
                handin.remove()

    def _wanted_calls(self, handin: HandIn) -> tuple[list[dict], BuildResult | None]:
        """Import model_new.py from the hand-in in a candidate process and make ModelNew: the load_inline calls it
        made that are not built yet."""
        start = time.monotonic()
        try:
            with ChildProcess(
                memory_limit_bytes=self.options.memory_limit_bytes,
                zygote=self._fork_server(),
                cell=self.cell(),
                device=self.device.kind,
            ) as child:
                reply = child.request(
                    {
                        "op": "load",
                        "handin": handin.inside,
                        "device": self.device.kind,
                        "import_only": True,
                        "init_inputs": self.task.init_inputs(),
                    },
                    timeout_s=self.options.build_timeout_s,
                    what="finding the load_inline calls (importing model_new.py)",
                )
        except ChildFailure as f:
            failed = BuildResult(
                False, time.monotonic() - start, errors=f.message + _tail(f.output), timed_out=f.code == "TIMEOUT"
            )
            return [], failed
        wanted = (reply.get("load_inline") or {}).get("wanted") or []
        if not wanted and not reply.get("ok", False):
            err = str(reply.get("error", ""))
            failed = BuildResult(False, time.monotonic() - start, errors=f"importing model_new.py failed: {err}")
            return [], failed
        return list(wanted), None

    def _child_env(self) -> dict[str, str]:
        """Every core for the candidate's own threads' sake (OpenMP reads OMP_NUM_THREADS where set)."""
        return {"MAX_JOBS": str(os.cpu_count() or 1)}

    # ----- evaluate ---------------------------------------------------------------------------------------------

    def evaluate(self, ws: Workspace, timing: bool | None = None) -> Verdict:
        """The verdict on the candidate in `ws`. An evaluation that ran out of device memory while other work shared
        the device (another candidate's allocation, beside this one's reference or inputs or candidate) is run again
        with the device alone, and that run's verdict counts: a neighbour never decides a candidate's reward."""
        try:
            v = self._evaluate(ws, timing)
            first = "; ".join(x.message for x in v.violations)
        except TaskError as exc:
            if not self._out_of_memory_beside_others(str(exc)):
                raise
            first = str(exc)
        else:
            if not self._out_of_memory_beside_others(first):
                return v
        with alone_here():
            self._ready_alone()
            v = self._evaluate(ws, timing)
        v.notes.append(
            f"ran out of device memory while other work shared the device ({_short(first, 300)}); evaluated again "
            "with the device alone: this verdict is that evaluation's"
        )
        return v

    def _ready_alone(self) -> None:
        """Before an evaluation runs again with the device alone: the processes started while the device was full
        go, and the candidate's next process starts its device (its CUDA context) while this evaluation holds the
        device alone. The shares the evaluation takes cover its own work, not a process's start: without this, a
        neighbour that still fills the device makes the new process fail to start as the first one did (seen when
        the task's check, whose retry used to wait for the device, was recalled instead of run)."""
        self._adopt_starting()
        while self._spares:
            self._spares.popleft().close()
        with device_share(exclusive=True):
            child = self._new_process()
            try:
                child.handshake()
            except ChildFailure:
                child.close()  # the evaluation starts its own and reports what that one meets
                return
        self._spares.appendleft(child)

    def _out_of_memory_beside_others(self, text: str) -> bool:
        return self.device.is_cuda and not alone() and DEVICE_OOM.search(text or "") is not None

    def _evaluate(self, ws: Workspace, timing: bool | None = None) -> Verdict:
        with self.task.held():  # a hosted task's process stays for the whole evaluation (task_host.py)
            return self._evaluate_held(ws, timing)

    def _evaluate_held(self, ws: Workspace, timing: bool | None = None) -> Verdict:
        timing = self.options.timing if timing is None else timing
        t0 = time.monotonic()
        timeline = Timeline(t0)
        self._phase("auditing the sources")
        source = read_candidate(ws)
        v = audited(self.task, self.device, ws, self.options.audit_static, source)
        if v.violations:  # milliseconds: nothing has run, not even the reference
            return self._finish(v, t0)
        try:
            cell = self.cell()
        except confine.Unconfined as exc:
            v.reject("UNCONFINED", f"--confine strict: this machine cannot jail the candidate ({exc}); nothing ran")
            return self._finish(v, t0)
        self._start_early(timing)
        handin = cell.handin()
        handin.put("model_new.py", source)
        # The CPU's part of a cold start beside the task check and the baselines (overlap.py decides where it runs)
        measuring = timing and not (self.baselines.all_cached() and peaks_cached(self.device))
        quiet = threading.Event()  # no clean measurement left in this evaluation
        if not measuring:
            quiet.set()
        room = room_beside_measurement(self.device.is_cuda, measuring)
        jobs = {"build": Beside("build", lambda: self.build(ws, handin, quiet), timeline, room, quiet)}
        if (
            self._link_baseline is None
            and self._calibration is None
            and self.options.audit_static
            and ws.candidate_format() is not CandidateFormat.PYTHON
        ):
            self._calibration = Beside("link_calibration", lambda: baseline_symbols(self.device), timeline, room, quiet)
        child = profiler = ref = None
        everywhere = set(os.sched_getaffinity(0))
        if measuring and self.options.fork_server and self._zygote is None:  # its import of torch, idle once timed
            jobs["fork_server"] = Beside(
                "fork_server", lambda: self._fork_server().wait_ready(), timeline, everywhere, quiet
            )

        def before_measuring():  # the device's clean measurements wait for the fork server's import to end
            if "fork_server" in jobs:
                jobs["fork_server"].result()

        try:
            # The task's check first, in this thread: its deadline is an alarm (the main thread's), and the
            # baselines' preparation runs task code in this process too (its sizes, on the meta device).
            self._phase("checking the task with null candidates")
            with timeline.span("task_check"):
                self._check_task(v)
            v.seconds["task_check"] = _length(timeline, "task_check")
            if self._validated_alone:
                v.notes.append(
                    f"the task's check ran out of device memory while other work shared the device "
                    f"({self._validated_alone}); it was checked again with the device alone"
                )
            if timing:  # clean baselines: no candidate process may exist while they are measured
                self._phase("measuring eager and torch.compile (once per task and machine)")
                with timeline.span("baselines"):
                    self._prepare_timing(before_measuring)
                v.seconds["baselines"] = _length(timeline, "baselines")
            quiet.set()
            child = self._candidate_process()  # creates its CUDA context and sets its profiler up during the build
            if not jobs["build"].done():
                self._phase("building the extension")
            build = jobs["build"].result()
            v.build = build.to_dict()
            v.seconds["build"] = round(build.seconds, 3)
            if not build.ok:
                v.reject("BUILD_TIMEOUT" if build.timed_out else "BUILD_FAILED", build.errors or "the build failed")
                child = self._keep_as_spare(child)  # it was sent nothing: the next evaluation's process
                return self._finish(v, t0, timeline)
            handin.seal()
            self._expanded_audit(build, v)
            extension = self._link_audit(handin, v)
            if v.violations:
                child = self._keep_as_spare(child)
                return self._finish(v, t0, timeline)
            self._phase("verifying on fresh inputs")
            t1 = time.monotonic()
            timeline.begin("verify")
            child.handshake()
            v.seconds["child_start"] = round(time.monotonic() - t1, 3)  # what the build did not hide
            v.confinement = {**child.confinement, "jail": cell.jail.to_dict()}
            if cell.jail.notes or not v.confinement.get("confined") or v.confinement.get("notes"):
                v.notes.append(f"the candidate's process ran {confine.describe(v.confinement)}")
            runner = TrialRunner(
                self.task, self.device, child, self.options.tolerance, self.options.call_timeout_s, v, extension
            )
            with device_share(exclusive=False):
                ref = runner.run(handin.inside, self.options.stock_trials, self.options.build_timeout_s + 120)
                watch = None
                if v.correct and ref is not None and not self.device.is_cuda:
                    self._phase("sampling where forward's CPU time goes")
                    watch = self._attribute(child, handin, ref, v)
            timeline.end("verify")
            v.seconds["verify"] = _length(timeline, "verify")
            if v.correct and timing and ref is not None:
                self._phase("timing the candidate")
                with timeline.span("timing"):
                    profiler = self._profiler()
                    profiler.watch = watch  # every batch of the candidate's is sampled, the timed ones too
                    self.baselines.wait_warm()  # before the device is held alone: the warming thread shares it
                    with device_share(exclusive=True):
                        profiler.run(child, ref, runner.ext, v)
                v.seconds["timing"] = _length(timeline, "timing")
            if watch is not None and v.correct:
                self._judge_work(watch, v)
        except ChildFailure as f:
            v.reject(f.code, f.message + _tail(f.output))
        finally:
            quiet.set()  # a job still waiting (the task check failed) runs and ends before its hand-in goes
            for job in jobs.values():
                with contextlib.suppress(Exception):
                    job.result()
            if child is not None:
                child.close()
            if profiler is None:
                handin.remove()
        if profiler is not None:
            with device_share(exclusive=True):
                profiler.settle(v)
                if self.options.ncu and v.correct and self.device.is_cuda:
                    self._ncu(handin, ref, v)
            handin.remove()
            if self.options.ncu and v.correct and not self.device.is_cuda:
                v.notes.append("the Nsight Compute summary needs a CUDA device; skipped")
        tampered = ws.tampered_infrastructure(self.task.source)
        if tampered:
            ws.ensure_infrastructure(self.task.source)
            v.reject("INFRA_TAMPERED", f"fixed files changed while the candidate was evaluated: {', '.join(tampered)}")
        self._start_spare()
        return self._finish(v, t0, timeline)

    # ----- candidate processes -----------------------------------------------------------------------------------

    def _new_process(self) -> ChildProcess:
        child = ChildProcess(
            extra_env=self._child_env(),
            device=self.device.kind,
            memory_limit_bytes=self.options.memory_limit_bytes,
            zygote=self._fork_server(),
            warm_profiler=True,
            cell=self.cell(),
        )
        child.spawn()
        return child

    def _start_early(self, timing: bool) -> None:
        """When nothing needs the machine quiet (no baseline and no device peak left to measure), start what the
        verification and the timing will need before the task is checked: the fork server's `import torch`, the
        candidate's process (its CUDA context and profiler take seconds) and the cached baselines' workers. They
        get ready during the task check and the build instead of after them."""
        if timing and not (self.baselines.all_cached() and peaks_cached(self.device)):
            return  # the first evaluation on this machine: baselines and peaks are measured with nothing beside them
        if timing:
            self.baselines.get()
            self.baselines.warm_in_background()
        if self.options.fork_server and self._starting is None and not any(s.alive() for s in self._spares):
            self._fork_server()
            self._starting = StartingProcess(self._new_process)

    def _adopt_starting(self) -> None:
        if self._starting is not None:
            starting, self._starting = self._starting, None
            self._spares.append(starting.get())

    def _candidate_process(self) -> ChildProcess:
        """The oldest spare that is alive (the readiest), else a new process. A spare has loaded nothing: every
        evaluation's candidate runs in a process of its own."""
        self._adopt_starting()
        while self._spares:
            spare = self._spares.popleft()
            if spare.cell is self._cell and spare.alive():
                return spare
            spare.close()
        return self._new_process()

    def _keep_as_spare(self, child: ChildProcess) -> None:
        """A process that was never sent a request (the build failed) serves the next evaluation, first in line."""
        if self.options.spare_process and len(self._spares) < SPARE_PROCESSES:
            self._spares.appendleft(child)
        else:
            child.close()

    def _start_spare(self) -> None:
        """Once an evaluation is over (nothing is being timed), top the spares up (spare_process)."""
        if self.options.spare_process and self.options.fork_server:
            while len(self._spares) < SPARE_PROCESSES:
                self._spares.append(self._new_process())

    def _phase(self, what: str) -> None:
        if self.options.on_phase is not None:
            self.options.on_phase(what)

    def _check_task(self, v: Verdict) -> None:
        """The task's own check (once per evaluator) and its null candidates (a degenerate task is flagged)."""
        self.validate()
        self._flag_degenerate(v)

    def _expanded_audit(self, build: BuildResult, v: Verdict) -> None:
        """The candidate's C++ and CUDA as the preprocessor left them, judged by the source scan's rules
        (audit/expanded_scan.py): a name a macro spells is seen."""
        if not self.options.audit_static or not build.expanded:
            return
        t0 = time.monotonic()
        tc = toolchain_for(self.device)
        machinery = lambda compiler: expanded_scan.machinery_for_toolchain(tc, compiler)  # noqa: E731
        for expansion in build.expanded:
            for violation in expanded_scan.scan(expansion, machinery):
                v.reject(violation.code, violation.message)
        v.seconds["expanded_audit"] = round(time.monotonic() - t0, 3)

    def _link_audit(self, handin: HandIn, v: Verdict) -> Extension | None:
        """Read what the handed-in libraries (exactly what the candidate's process will load) define and link
        against; judge the latter (unless the static audits are off)."""
        t0 = time.monotonic()
        libraries = [inspect_library(p) for p in handin.libraries()]
        if self.options.audit_static and libraries:
            if self._link_baseline is None:
                calibration, self._calibration = self._calibration, None
                self._link_baseline = calibration.result() if calibration else baseline_symbols(self.device)
            for lib in libraries:
                for violation in audit_library(lib, os.path.relpath(lib.path, handin.path), self._link_baseline):
                    v.reject(violation.code, violation.message)
        v.seconds["link_audit"] = round(time.monotonic() - t0, 3)
        return Extension.of(libraries) if libraries else None

    def _attribute(self, child: ChildProcess, handin: HandIn, ref, v: Verdict) -> attribution.Watch | None:
        """CPU: start sampling where the candidate's CPU time goes (audit/attribution.py) over batches of its calls,
        each on contents never seen before and checked at calls chosen after they returned (batch_check.py), until
        ATTRIBUTION_CPU_S of computing were sampled; the timing's batches are sampled by the same Watch. None (with a
        note) where this machine refuses the sampling."""
        pid = child.harness_pid()
        if pid is None:
            v.notes.append("where forward's CPU time went could not be sampled (the candidate's process was not found)")
            return None
        watch = attribution.Watch(pid, [str(p) for p in handin.libraries()])
        sets = draw_input_sets(lambda _: self.task.make_inputs(secrets.randbits(62), "cpu"), "cpu")
        specs = [InputSpec.of(s) for s in sets]
        check = BatchCheck(
            self.task, ref, sets, specs, self.options.tolerance, child, v, code="OUTPUT_MISMATCH", where="cpu-time"
        )
        request = early_request(child, "running forward while its CPU time is sampled", self.options.call_timeout_s)
        message = {"op": "batch", "target": "candidate", "specs": [s.to_list() for s in specs], "keep": KEEP}
        n, ran_s, first = CALIBRATION_CALLS, 0.0, True
        try:
            while first or (  # one sampled batch at least, however long the first took
                not watch.failed
                and (watch.split.calls == 0 or ran_s < ATTRIBUTION_MAX_S)
                and watch.split.computing_s < ATTRIBUTION_CPU_S
            ):
                sent = {**message, "n": n, "seed": secrets.randbits(62), **({"inputs": sets} if first else {})}
                # the first batch is checked but not sampled: the threads a process starts on its first parallel
                # work (OpenMP's) exist before the sampling lists them; a thread started later counts as unseen
                with watch.batch(n) if not first else contextlib.nullcontext() as stop:
                    reply, seconds = request(sent, at_early=stop)
                    if not reply.get("ok", False):
                        v.reject("FORWARD_RAISED", f"[cpu-time] ModelNew.forward raised {reply.get('error')}")
                        return None
                    check("candidate", sent, reply)
                ran_s, first = ran_s + seconds, False
                n = calls_for(n, seconds * 1e3, 0.0) or n
        except BatchRefused:
            return None
        if watch.failed:
            v.notes.append(f"where forward's CPU time went could not be sampled on this machine ({watch.failed})")
            return None
        if self._work is None:
            try:
                self._work = self._reference_work(ref, sets, specs)
            except attribution.Unavailable as exc:
                v.notes.append(f"what the reference's calls cost could not be sampled on this machine ({exc})")
                return None
        return watch

    def _reference_work(self, ref, sets: list, specs: list) -> attribution.Work:
        """What the reference's calls cost in this process, sampled like the candidate's: its calls, and calls that
        only change their inputs and allocate outputs like its (attribution.reference_work)."""
        import torch

        from cudagent.trees import clone, tensors

        outputs = list(tensors(self.task.run(ref, sets[0])))
        work_sets = [[clone(x) for x in s] for s in sets]

        def runner(fn):
            return lambda n: run_calls(fn, work_sets, sets, specs, secrets.randbits(62), n)

        def calls_for_run(run) -> int:
            t = time.perf_counter()
            run(2)
            per_call = max((time.perf_counter() - t) / 2, 1e-6)
            return max(3, min(200_000, int(attribution.REFERENCE_S / per_call)))

        return attribution.reference_work(
            runner(lambda *xs: self.task.run(ref, list(xs))),
            runner(lambda *xs: [torch.empty_like(t) for t in outputs]),
            calls_for_run,
        )

    def _judge_work(self, watch: attribution.Watch, v: Verdict) -> None:
        """The candidate's foreign work over every batch sampled, against the reference's (WORK_NOT_OWN)."""
        split = watch.split
        v.cpu_time = {**split.to_dict(), **self._work.to_dict(), "described": split.describe()}
        why = attribution.judge(split, self._work)
        if why:
            v.reject("WORK_NOT_OWN", f"[cpu-time] {why}")

    def _flag_degenerate(self, v: Verdict) -> None:
        """Null candidates (zeros, the mean, passthrough, a subsample) that pass this task under its stock inputs:
        a correct verdict on such a task proves little. Computed once per evaluator, here in the trusted parent."""
        if self._nulls is None:
            with device_share(exclusive=False):
                self._nulls = null_candidates(self.task, self.device.kind, self.options.tolerance)
            if not self.options.host_task:
                checked_tasks.remember(self.task, self.device, self.options.tolerance, self._nulls)
        v.null_candidates = list(self._nulls)
        if self._nulls:
            v.flags.append(
                f"DEGENERATE_TASK: the null candidate(s) {', '.join(self._nulls)} pass this task under its stock "
                "inputs (atol/rtol as set); a correct verdict here proves little, and timing uses inputs under a "
                "secret scale and offset"
            )

    def _ncu(self, handin: HandIn, ref, v: Verdict) -> None:
        """Nsight Compute reads the GPU's counters through the candidate's process, which then keeps its privileges
        and runs outside the jail: refused under --confine strict, said in the verdict otherwise."""
        if self.options.confine == "strict":
            v.notes.append("the Nsight Compute summary needs an unconfined process; skipped under --confine strict")
            return
        if self.options.confine != "off":
            v.notes.append("the Nsight Compute run replayed the candidate in a process outside the jail")
        inputs = self.task.make_inputs(secrets.randbits(62), self.device.kind)
        rows, why = ncu_summary(load_message(self.task, str(handin.path), self.device, ref), inputs, self._child_env())
        if v.timing is not None:
            v.timing["ncu"] = rows
        if why:
            v.notes.append(why)

    def _prepare_timing(self, before_measuring=None) -> None:
        """Baselines (each prepared beside other work on the device, timed alone: baselines.py; `before_measuring()`
        once prepared), the device's peaks (measured alone, once per machine) and the task's cost."""
        self.baselines.get(before_measuring)
        if before_measuring is not None:
            before_measuring()
        if self._peaks is None:
            with device_share(exclusive=True):
                self._peaks = device_peaks(self.device)
        if self._cost is None:
            with device_share(exclusive=False):
                if isinstance(self.task, HostedTask):  # counted where its code runs
                    self._cost = TaskCost(**self.task.cost(self.device.kind))
                else:
                    model = self.task.build_model(secrets.randbits(62), self.device.kind)
                    inputs = self.task.make_inputs(secrets.randbits(62), self.device.kind)
                    self._cost = task_cost(model, inputs, self.task.run(model, inputs))
        self.baselines.warm_in_background()  # cached baselines: their workers get ready during the build

    def _profiler(self) -> Profiler:
        return Profiler(
            self.task,
            self.device,
            self.baselines,
            self.options.tolerance,
            self.options.plan,
            self.options.margin,
            self._peaks,
            self._cost,
        )

    def _finish(self, v: Verdict, t0: float, timeline: Timeline | None = None) -> Verdict:
        if timeline is not None:
            v.timeline = timeline.to_dict()
        if v.violations:
            v.correct = False
        if not v.correct or v.tier == -1:
            t = v.time_ms
            v.set_times(t["eager"], t["compile"], t["candidate"] if v.correct else None, self.options.margin)
        v.seconds["total"] = round(time.monotonic() - t0, 3)
        return v


def _length(timeline: Timeline, phase: str) -> float:
    start, end = timeline.spans[phase]
    return round(end - start, 3)


def _short(text: str, limit: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit] + " ..."


def _tail(output: str, limit: int = 1500) -> str:
    output = (output or "").strip()
    if not output:
        return ""
    return "\nlast output of the process:\n" + output[-limit:]
