"""Timing a verified candidate honestly, in the trusted parent (one module: every check reads the same measurements).

The candidate is timed inside its own child over input sets drawn here with secret seeds (rotated, L2 flushed,
CUDA events on the caller's stream queued behind a GPU-side lead, each sample no less than the host's enqueue time,
median of at least 100 samples and 0.5 s; measure.py). Before every call the set it uses gets contents never seen
before: its pristine draw under a fresh scale and offset from a stream this process can replay (transforms.py), so
no call can be answered from a memo, and the stock distribution a candidate might recognise never reaches it. Then
the numbers are checked:

- the outputs of a few samples, chosen by the child only after each sample returned, are compared with the
  reference on the same transformed inputs, computed here afterwards (TIMED_OUTPUT_MISMATCH);
- the child's wall clock against its events, and this process's own clock against the samples the child
  reported (TIMING_WALL_MISMATCH): work outside the caller's stream, or patched timers;
- the summed kernel time of all streams against the event time (TIMING_KERNELS_OUTSIDE_EVENTS);
- the physical floor: under half of it is impossible (TIMING_BELOW_FLOOR); over 10x eager is flagged.

What is compared: for each of the three targets, the slower of two figures, one of them by the evaluator's own clock
(parent_clock.py): the candidate, eager and torch.compile are each run in batches of calls ending in a checksum of
the last outputs that is checked against the reference here, and this process's monotonic clock around each batch
(its fixed cost and a null target's per-call cost taken off, interleaved rounds) gives a time per call no clock in
the candidate's process can move. The in-process median stands beside it, since only the samples change the inputs
before every call. An in-process median far under the parent's figure is TIMING_CLOCK_MISMATCH.

A tier of 2 or 3 is then confirmed by interleaved rounds (candidate, eager, compile, ...). The candidate's process
interfered (BASELINE_INTERFERENCE; on the CPU, where any other program's load does the same, the tier drops to 1
instead) if it used CPU time while the baselines ran, or if a baseline's device time was slower beside it than alone.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass, field
from functools import partial

from cudagent.device.info import DeviceInfo
from cudagent.evaluator.audit.link_audit import kernel_base_name
from cudagent.evaluator.compare import Tolerance
from cudagent.evaluator.exact import exact_answer, judged
from cudagent.evaluator.jail.process import ChildProcess
from cudagent.evaluator.judge import Extension, judge_tampering
from cudagent.evaluator.timing import parent_clock
from cudagent.evaluator.timing.baselines import Baseline, BaselineError, Baselines, Measurement
from cudagent.evaluator.timing.batch_check import KEEP, BatchCheck
from cudagent.evaluator.timing.measure import INPUT_SETS, Plan, draw_input_sets
from cudagent.evaluator.timing.parent_clock import (
    CLOCK_MISMATCH_FACTOR,
    CLOCK_MISMATCH_SLACK_MS,
    BatchRefused,
    ParentClock,
    early_request,
)
from cudagent.evaluator.timing.roofline import Peaks, TaskCost, achieved, floor_ms
from cudagent.evaluator.transforms import InputSpec, ParamStream
from cudagent.evaluator.verdict import TimeStats, Verdict, reward_tier
from cudagent.task import Task
from cudagent.trees import nbytes

RECHECKS = 3
# What the in-process samples hold on a GPU (the detail beside the parent's clock).
SAMPLE = (
    "per call, the larger of the device time (CUDA events behind a GPU-side lead) and the host's enqueue time, the "
    "time a call takes in a loop"
)
KERNEL_ITERATIONS = 20
CONFIRM_ROUNDS = 5
CONFIRM_PLAN = Plan(min_samples=20, min_seconds=0.02, max_samples=200, warmup_calls=10)
# A baseline this much slower beside the candidate than alone means interference. CPU timings on a small shared
# machine swing far more than a GPU's, so the CPU gets more room.
INTERFERENCE = {"cuda": 1.15, "cpu": 1.5}
# The candidate's process has nothing to do while the baselines run beside it; CPU time it uses then (a spinning
# thread, a helper process) is interference with the baselines' host side.
IDLE_CPU_FLOOR_S = 0.05
IDLE_CPU_SHARE = 0.2
# The null target's per-call cost this many times the candidate's in-process median or more: the parent's clock cannot
# resolve a call (the subtraction is noise), tier 1 at most. Unloaded, changing a small task's inputs costs 2-5 calls.
RESOLUTION_FACTOR = 20.0
STALE = 1.1  # a cached baseline this much slower than in short interleaved rounds was measured in bad conditions
OVER_EAGER_FLAG = 10.0


@dataclass
class Profiler:
    task: Task
    device: DeviceInfo
    baselines: Baselines
    tolerance: Tolerance
    plan: Plan
    margin: float
    peaks: Peaks | None = None
    cost: TaskCost | None = None
    detail: dict = field(default_factory=dict)
    # baselines that ran slower beside the candidate than their cached clean time: target -> median beside it
    suspects: dict = field(default_factory=dict)
    # baselines whose cached time looks too slow (they ran faster in short interleaved rounds than in the long clean
    # run, which is never expected): measured again once the candidate's process is gone
    stale: list = field(default_factory=list)
    confirmed_tier: int | None = None
    parent_ms: dict | None = None  # each target's time per call by the parent's clock (None: it could not run)
    own_ms: float | None = None  # the candidate's in-process median
    clock: ParentClock | None = None
    specs: list = field(default_factory=list)  # each timing set's InputSpec
    unvouched: list = field(default_factory=list)  # CPU: why the parent's clock vouches for no speedup (tier 1 at most)
    watch: object = None  # CPU: attribution.Watch sampling every batch of the candidate's (audit/attribution.py)

    def run(self, child: ChildProcess, ref_model, ext: Extension | None, v: Verdict) -> None:
        """Time the candidate loaded in `child`; fill v.time_ms, speedups, tier and v.timing."""
        baselines = self.baselines.get()
        v.notes.extend(n for n in self.baselines.notes if n not in v.notes)
        draw = self.task.make_inputs
        sets = draw_input_sets(lambda _: draw(secrets.randbits(62), self.device.kind), self.device.kind)
        self.specs = [InputSpec.of(s) for s in sets]
        t0 = time.monotonic()
        meas = self._time(child, ref_model, sets, v)
        t1 = v.seconds["timing_candidate"] = round(time.monotonic() - t0, 3)
        if meas is None or not v.correct:
            return
        kernels = self._kernels(child, meas, ext, v) if self.device.is_cuda else None
        v.seconds["timing_kernels"] = round(time.monotonic() - t0 - t1, 3)
        t0 = time.monotonic()
        clocked = self._parent_clock(child, ref_model, sets, baselines, meas, v)
        v.seconds["timing_parent_clock"] = round(time.monotonic() - t0, 3)
        if not v.correct:
            return
        self.parent_ms, self.own_ms = clocked, meas.stats.median
        compared = self._compared(baselines)
        eager, compiled, cand = (compared.get(t) for t in ("eager", "compile", "candidate"))
        self._roofline(cand, baselines, v)
        if not v.correct:
            return
        v.set_times(eager, compiled, cand, self.margin)
        if clocked is None:
            v.tier = min(v.tier, 1)
        else:
            self._judge_resolution(meas, v)
            self._judge_own_clock(clocked["candidate"], meas, v)
            if not v.correct:
                return
        self.detail["targets"] = {
            "candidate": meas.to_dict(),
            **{t: (b.measurement.to_dict() if b else None) for t, b in baselines.items()},
        }
        self.detail["kernels"] = {"candidate": kernels, "compile": _breakdown(baselines["compile"], None)}
        _flag_over_eager(v)
        if v.tier >= 2:
            t0 = time.monotonic()
            self._confirm(child, baselines, v)
            v.seconds["timing_confirmation"] = round(time.monotonic() - t0, 3)
        for why in self.unvouched:  # after the confirmation, which also finds stale baselines and interference
            v.tier = min(v.tier, 1)
            v.notes.append(why)
        v.timing = self.detail

    # ----- the measurement ------------------------------------------------------------------------------------

    def _time(self, child: ChildProcess, ref_model, sets: list, v: Verdict) -> Measurement | None:
        plan = Plan(**{**asdict(self.plan), "keep": RECHECKS})
        seed = secrets.randbits(62)
        probe = self.task.run(ref_model, sets[0])  # output sizes only; the pristine sets are never timed as they are
        out_bytes = nbytes(probe)
        del probe
        child.use_arena(max(nbytes(sets), RECHECKS * out_bytes), self.device.kind)
        reply, elapsed = child.timed_request(
            {
                "op": "time",
                "plan": asdict(plan),
                "inputs": sets,
                "transform": self._transform(seed),
            },
            timeout_s=max(300.0, 10 * plan.max_seconds),
            max_bytes=(64 << 20) + 2 * RECHECKS * out_bytes,
            what="timing the candidate",
        )
        if not reply.get("ok", False):
            v.reject("FORWARD_RAISED", f"[timing] ModelNew.forward raised {reply.get('error')}")
            return None
        for f in judge_tampering(reply, "timing"):
            v.reject(f.code, f.message)
        self._recheck(reply.get("kept", {}), sets, seed, ref_model, v)
        meas = Measurement.of(reply)
        self._check_clocks(meas, reply, elapsed, plan, out_bytes, v)
        self.detail["protocol"] = {
            "input_sets": len(sets),
            "min_samples": plan.min_samples,
            "min_seconds": plan.min_seconds,
            "inputs_changed_before": "every call: the pristine set under a secret scale and offset",
            "rechecked_calls": sorted(int(c) for c in reply.get("kept", {})),
            "l2_flush": "2x L2 per sample" if self.device.is_cuda else "32 MiB per sample",
            "sample": (
                "max(device time between CUDA events queued behind a GPU-side lead, host enqueue time)"
                if self.device.is_cuda
                else "wall clock of one call"
            ),
            "in_process_sample": SAMPLE if self.device.is_cuda else "wall clock of one call",
            "compared": parent_clock.PROTOCOL,
        }
        return meas

    def _transform(self, seed: int) -> dict:
        return {"seed": seed, "specs": [spec.to_list() for spec in self.specs]}

    def _recheck(self, kept: dict, sets: list, seed: int, ref_model, v: Verdict) -> None:
        """Replay the transform stream to each kept call, run the reference on those inputs, compare."""
        if not kept:
            v.reject("TIMED_OUTPUT_MISMATCH", "[timing] no timed output came back for checking")
            return
        stream = ParamStream(seed)
        draws = {}
        last = max(int(c) for c in kept) if all(str(c).isdigit() for c in kept) else -1
        for c in range(last + 1):
            k = c % len(sets)
            draws[c] = (k, stream.next(len(sets[k])))
        for index, item in sorted(kept.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else -1):
            c = int(index) if str(index).isdigit() else -1
            if c not in draws or draws[c][0] != item.get("set"):
                v.reject("TIMED_OUTPUT_MISMATCH", "[timing] the outputs kept for re-checking came back mislabeled")
                return
            k, draw = draws[c]
            inputs = self.specs[k].apply(sets[k], draw)
            expected = self.task.run(ref_model, inputs)
            result = judged(
                expected, item["outputs"], self.tolerance, partial(exact_answer, self.task, ref_model, inputs)
            )
            if not result.ok:
                v.reject(
                    "TIMED_OUTPUT_MISMATCH",
                    f"[timing, call {c}] {result.violations[0].message}; outputs must stay right while being timed",
                )
                return

    def _check_clocks(
        self, meas: Measurement, reply: dict, elapsed: float, plan: Plan, out_bytes: int, v: Verdict
    ) -> None:
        event, wall = meas.stats.median, meas.wall.median
        if wall - event > 0.1 + 0.5 * event:
            v.reject(
                "TIMING_WALL_MISMATCH",
                f"[timing] each call took {wall:.3f} ms by the wall clock but "
                f"{event:.3f} ms by CUDA events on the caller's stream: work ran outside "
                "that stream or after the call returned",
            )
        loop = sum(reply.get("loop_ms", reply["wall_ms"])) / 1e3
        # What the loop's samples do not cover: warm-up calls, the reply's transfer, some bookkeeping.
        overhead = 3 * (plan.warmup_calls + INPUT_SETS) * max(reply.get("loop_ms", reply["wall_ms"])) / 1e3
        overhead += RECHECKS * out_bytes / 100e6 + 0.1
        self.detail["checks"] = {
            "wall_minus_event_ms": wall - event,
            "request_s": elapsed,
            "samples_s": loop,
            # how much of a sample was the host's enqueue time, and how often the GPU-side lead did not cover it
            "host_ms_median": TimeStats.of(reply["host_ms"]).median if reply.get("host_ms") else None,
            "lead_uncovered_samples": reply.get("uncovered", 0),
        }
        if elapsed > 2 * loop + overhead:
            v.reject(
                "TIMING_WALL_MISMATCH",
                f"[timing] the timing loop took {elapsed:.2f} s by the evaluator's clock "
                f"but its samples add up to {loop:.2f} s: the candidate's clocks lie",
            )

    def _kernels(self, child: ChildProcess, meas: Measurement, ext: Extension | None, v: Verdict) -> list | None:
        reply = child.request(
            {"op": "kernels", "iterations": KERNEL_ITERATIONS}, timeout_s=300, what="profiling the candidate's kernels"
        )
        if not reply.get("ok", False):
            v.notes.append(f"the kernel breakdown failed: {reply.get('error')}")
            return None
        per_call = sum(k["ns"] for k in reply["kernels"]) / 1e6 / reply["iterations"]
        self.detail.setdefault("checks", {})["kernel_ms_per_call"] = per_call
        if per_call > 1.2 * meas.stats.median + 0.01:
            v.reject(
                "TIMING_KERNELS_OUTSIDE_EVENTS",
                f"[timing] the kernels of one call add up to {per_call:.3f} ms "
                f"but the call measured {meas.stats.median:.3f} ms on the "
                "caller's stream: work ran on other streams",
            )
        return _breakdown(None, reply, ext)

    def _roofline(self, cand: float, baselines: dict, v: Verdict) -> None:
        if self.peaks is None or self.cost is None:
            return
        floor = floor_ms(self.cost, self.peaks)
        eager = baselines["eager"].compared_ms if baselines["eager"] else None
        # The floor assumes every input, parameter and output byte is needed; a reference faster than it proves
        # the task needs less, and then the floor says nothing.
        applies = eager is None or eager >= 0.9 * floor
        self.detail["roofline"] = {
            "cost": self.cost.to_dict(),
            "peaks": self.peaks.to_dict(),
            "floor_ms": floor,
            "floor_applies": applies,
            "candidate": achieved(self.cost, self.peaks, cand),
            **{t: achieved(self.cost, self.peaks, b.compared_ms) for t, b in baselines.items() if b},
        }
        if applies and cand < 0.5 * floor:
            v.reject(
                "TIMING_BELOW_FLOOR",
                f"[timing] {cand:.4f} ms is under half the physical floor {floor:.4f} ms "
                f"({self.cost.bytes / 1e6:.1f} MB must move, at {self.peaks.bandwidth_gbs:.0f} GB/s measured): "
                "no correct implementation is that fast",
            )

    # ----- the parent's clock ---------------------------------------------------------------------------------------

    def _parent_clock(
        self, child: ChildProcess, ref_model, sets: list, baselines: dict, meas: Measurement, v: Verdict
    ) -> dict | None:
        """Milliseconds per call of the candidate and each baseline by this process's clock (parent_clock.py), the
        candidate's batches checked against the reference; None (with a note) when a baseline's batches could not
        run: then no speedup is vouched for."""
        specs = [spec.to_list() for spec in self.specs]
        candidate = early_request(child, "timing the candidate's batch", max_bytes=(64 << 20) + 2 * nbytes(sets))
        targets = {"candidate": (candidate, {"target": "candidate", "specs": specs, "keep": KEEP})}
        try:
            for t in ("eager", "compile"):
                if baselines[t]:
                    targets[t] = (self.baselines.clock_request(t), {"target": t})
            null = (self.baselines.clock_request("null"), {"target": "null"})
            check = BatchCheck(self.task, ref_model, sets, self.specs, self.tolerance, child, v)
            self.clock = clock = ParentClock(targets, null, check=check, watch=self.watch)
            times = clock.run()
        except BatchRefused as exc:
            if v.correct:
                v.reject("FORWARD_RAISED", f"[timing, parent clock] {exc}")
            return None
        except BaselineError as exc:
            v.notes.append(f"the baselines could not be timed by the evaluator's clock ({exc}); tier kept at 1")
            return None
        self.detail["parent_clock"] = {**clock.to_dict(), "ms_per_call": times}
        return times

    def _compared(self, baselines: dict) -> dict:
        """What the tier compares, target by target: the slower of the parent's figure and the in-process median (the
        candidate's own samples, a baseline's clean cached or re-measured one); the in-process medians alone where
        the parent's clock could not run."""
        own = {"candidate": self.own_ms, **{t: baselines[t].compared_ms for t in ("eager", "compile") if baselines[t]}}
        if self.parent_ms is None:
            return own
        compared = {t: max(ms, own.get(t, 0.0)) for t, ms in self.parent_ms.items()}
        self.detail.setdefault("parent_clock", {})["compared_ms"] = compared
        return compared

    def _judge_resolution(self, meas: Measurement, v: Verdict) -> None:
        """The parent's figure is a batch's time less the null target's per call: where what every call pays besides
        itself (changing its inputs; on a loaded CPU, OpenMP threads stalled behind other programs: 36 ms a call beside
        a 0.02 ms add on two busy cores) dwarfs the candidate's call, the difference says nothing and cannot hold a
        forged in-process clock to account, so no speedup is vouched for."""
        null = self.clock.clocked["null"].per_call_ms()
        own = meas.stats.median
        if null > RESOLUTION_FACTOR * own:
            self.unvouched.append(
                f"changing a call's inputs took {null:.3f} ms by the evaluator's clock beside {own:.4f} ms a call: "
                "its clock cannot resolve the candidate's calls (other load?), so no speedup is vouched for (tier 1 at "
                "most)"
            )

    def _judge_own_clock(self, parent_ms: float, meas: Measurement, v: Verdict) -> None:
        """The candidate's in-process median against the parent's figure: far faster is a clock that lies, if the
        candidate's batches, timed again in longer batches, say so too: on a GPU a rejection. On a shared CPU other
        programs' threads stall a batch's input changes as readily (two processes' OpenMP threads on two cores: an
        honest 0.07 ms call read 4.5 ms in batches), so there it caps the tier at 1 with a note: a lying clock gains
        nothing, an honest one on a loaded machine is judged correct and unvouched."""
        own = meas.stats.median
        if parent_ms <= CLOCK_MISMATCH_FACTOR * own + CLOCK_MISMATCH_SLACK_MS:
            return
        what = (
            f"a call took {parent_ms:.4f} ms by the evaluator's clock but {own:.4f} ms by the clock read inside the "
            "candidate's process"
        )
        if not self.device.is_cuda:
            why = f"{what}: on the CPU that may be other load; no speedup is vouched for (tier 1 at most)"
            self.unvouched.append(why)
            return
        try:
            parent_ms = min(parent_ms, self.clock.again("candidate"))
        except (BatchRefused, BaselineError) as exc:
            if v.correct:
                v.reject("FORWARD_RAISED", f"[timing, parent clock] {exc}")
            return
        self.detail["parent_clock"] = {**self.detail.get("parent_clock", {}), **self.clock.to_dict()}
        if parent_ms > CLOCK_MISMATCH_FACTOR * own + CLOCK_MISMATCH_SLACK_MS:
            v.reject(
                "TIMING_CLOCK_MISMATCH",
                f"[timing] {what}, and {parent_ms:.4f} ms in batches four times as long: that clock does not tell "
                "the time",
            )

    # ----- interleaved confirmation ------------------------------------------------------------------------------

    def _confirm(self, child: ChildProcess, baselines: dict, v: Verdict) -> None:
        samples: dict[str, list[float]] = {"candidate": [], "eager": [], "compile": []}
        rounds: dict[str, list[float]] = {"candidate": [], "eager": [], "compile": []}  # each round's median
        device: dict[str, list[float]] = {"eager": [], "compile": []}
        idle_cpu_s = baseline_s = 0.0  # the candidate's process's CPU time while the baselines ran, and their time
        try:
            for _ in range(CONFIRM_ROUNDS):
                reply = child.request(
                    {"op": "time", "plan": asdict(CONFIRM_PLAN), "transform": self._transform(secrets.randbits(62))},
                    timeout_s=300,
                    what="confirming the candidate's time",
                )
                if not reply.get("ok", False):
                    v.reject("FORWARD_RAISED", f"[confirmation] ModelNew.forward raised {reply.get('error')}")
                    return
                samples["candidate"] += reply["ms"]
                rounds["candidate"].append(TimeStats.of(reply["ms"]).median)
                for t in ("eager", "compile"):
                    if baselines[t]:
                        cpu0, t0 = child.cpu_seconds(), time.monotonic()
                        m = self.baselines.measure(t, CONFIRM_PLAN)
                        baseline_s += time.monotonic() - t0
                        idle_cpu_s += child.cpu_seconds() - cpu0
                        samples[t] += m.ms  # compared as the candidate's samples are
                        rounds[t].append(m.stats.median)
                        device[t] += m.device_ms  # interference is judged on the device's side alone
        except BaselineError as exc:
            v.notes.append(f"the interleaved confirmation could not run ({exc}); tier kept at 1")
            v.tier = 1
            return
        med = {t: TimeStats.of(xs).median if xs else None for t, xs in samples.items()}
        tier = reward_tier(v.correct, med["candidate"], med["eager"], med["compile"], self.margin)
        self.detail["confirmation"] = {
            "rounds": CONFIRM_ROUNDS,
            "median_ms": med,
            "round_median_ms": {t: xs for t, xs in rounds.items() if xs},
            "tier": tier,
            "candidate_cpu_s_while_baselines_ran": idle_cpu_s,
            "baselines_s": baseline_s,
        }
        self.confirmed_tier = tier
        if idle_cpu_s > max(IDLE_CPU_FLOOR_S, IDLE_CPU_SHARE * baseline_s):
            self._interfered(
                v,
                f"the candidate's process used {idle_cpu_s:.2f} s of CPU time while the baselines ran beside it "
                f"for {baseline_s:.2f} s, when it had nothing to do",
            )
            return
        for t in ("eager", "compile"):
            if not (baselines[t] and device[t]):
                continue
            beside = TimeStats.of(device[t]).median
            if beside > INTERFERENCE[self.device.kind] * baselines[t].measurement.device.median:
                self.suspects[t] = beside
            elif med[t] * STALE < baselines[t].compared_ms:
                self.stale.append(t)
        if tier < v.tier:
            measured = ", ".join(f"{t} {ms:.4f} ms" for t, ms in med.items() if ms is not None)
            v.notes.append(
                f"the interleaved confirmation measured tier {tier}, not {v.tier} ({measured}: medians of "
                f"{CONFIRM_ROUNDS} rounds); tier {tier} granted"
            )
            v.tier = tier

    def _interfered(self, v: Verdict, what: str) -> None:
        if self.device.is_cuda:
            v.reject("BASELINE_INTERFERENCE", f"[confirmation] {what}")
        else:  # on a shared CPU, other programs' load does this as readily as any candidate could
            v.notes.append(f"{what}: on the CPU that may be other load; no speedup is vouched for, tier 1")
            v.tier = min(v.tier, 1)

    def settle(self, v: Verdict) -> None:
        """Judge suspected interference once the candidate's process is gone, like for like.

        A baseline's device time (its events' time, which the host's load does not move) is compared: short
        interleaved rounds can run slower than one long clean measurement (clocks ramp between rounds), so a suspect
        baseline is re-measured alone in the same rounds, and only one slower beside the candidate than alone, round
        for round, was slowed by it. The host's side is judged by the candidate's own CPU time (`_confirm`).
        """
        if not v.correct:
            return
        if self.stale:
            self._refresh_stale(v)
        for t, beside in self.suspects.items():
            try:
                alone = TimeStats.of(
                    [x for _ in range(CONFIRM_ROUNDS) for x in self.baselines.measure(t, CONFIRM_PLAN).device_ms]
                ).median
            except BaselineError as exc:
                v.notes.append(f"the {t} baseline could not be re-measured ({exc}); tier kept at 1")
                v.tier = min(v.tier, 1)
                continue
            self.detail.setdefault("confirmation", {}).setdefault("alone_device_ms", {})[t] = alone
            if beside > INTERFERENCE[self.device.kind] * alone:
                self._interfered(
                    v,
                    f"the {t} baseline's kernels took {beside:.4f} ms beside the candidate's process "
                    f"but {alone:.4f} ms alone",
                )
                return

    def _refresh_stale(self, v: Verdict) -> None:
        """Re-measure cached baselines that look too slow and recompute the speedups; the lower tier wins."""
        for t in self.stale:
            old = self.baselines.get()[t].compared_ms
            try:
                fresh = self.baselines.refresh(t).compared_ms
            except BaselineError as exc:
                v.notes.append(f"the cached {t} baseline looks stale but could not be re-measured ({exc})")
                continue
            v.notes.append(f"the cached {t} baseline ({old:.4f} ms) was stale: re-measured alone at {fresh:.4f} ms")
        fresh = self.baselines.get()
        tier = v.tier
        compared = self._compared(fresh)
        v.set_times(compared.get("eager"), compared.get("compile"), compared["candidate"], self.margin)
        v.tier = min(v.tier, tier, self.confirmed_tier if self.confirmed_tier is not None else v.tier)
        for t in ("eager", "compile"):
            if fresh[t] and self.detail.get("targets"):
                self.detail["targets"][t] = fresh[t].measurement.to_dict()
        self._roofline(v.time_ms["candidate"], fresh, v)
        _flag_over_eager(v)


def _flag_over_eager(v: Verdict) -> None:
    v.flags = [f for f in v.flags if not f.startswith("SPEEDUP_OVER_10X")]
    if v.speedup_vs_eager and v.speedup_vs_eager > OVER_EAGER_FLAG:
        v.flags.append(
            f"SPEEDUP_OVER_10X: {v.speedup_vs_eager:.1f}x faster than eager; results this good deserve a look"
        )


def _breakdown(baseline: Baseline | None, reply: dict | None, ext: Extension | None = None) -> list | None:
    """Per-call kernel table: name, ms per call, share of kernel time, launches per call, own or not."""
    data = reply if reply is not None else (baseline.kernels if baseline else None)
    if not data:
        return None
    n = max(1, int(data["iterations"]))
    total = sum(k["ns"] for k in data["kernels"]) or 1
    rows = []
    for k in data["kernels"]:
        row = {
            "name": k["name"],
            "ms_per_call": k["ns"] / 1e6 / n,
            "share_pct": 100 * k["ns"] / total,
            "launches_per_call": k["count"] / n,
        }
        if ext is not None and ext.defined is not None:
            row["own"] = kernel_base_name(k["name"]) in ext.defined
        rows.append(row)
    return rows
