"""The trusted evaluator: static audits, build, trials in a child process, timing, verdict.

The reference lives only here, in the parent: fresh secret seeds for weights and inputs every evaluation, the
reference's outputs computed here and never sent anywhere. The candidate runs in a spawned child; what it returns
is compared here. Trials:

    stock-1..5       get_inputs() with fresh seeds (the first also records kernels and streams on CUDA)
    mutation         the same input buffers, new contents
    sparse-mutation  the same buffers, a small block changed
    determinism      stock-1's contents again, in fresh buffers: must match the reference and stock-1's output
    stress           heavy tails, other scale and offset, spikes (see trials.py)
    random-weights   every parameter and buffer redrawn, then a fresh stock draw
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

from cudagent.build import DEFAULT_BUILD_TIMEOUT_S, BuildResult, build_workspace, summarize_compiler_output
from cudagent.evaluator.compare import Tolerance, compare
from cudagent.evaluator.judge import Extension, judge_call, judge_failed_call
from cudagent.evaluator.kernel_scan import scan_files
from cudagent.evaluator.measure import Plan
from cudagent.evaluator.session import ChildFailure, ChildProcess
from cudagent.evaluator.static_audit import audit_model_new
from cudagent.evaluator.timing import BaselineTimer, time_candidate
from cudagent.evaluator.trials import sparse_mutation, stress_inputs
from cudagent.evaluator.verdict import TIER_MARGIN, Trial, Verdict
from cudagent.hardware import DeviceInfo
from cudagent.task import Task, randomized_state, validate_task
from cudagent.workspace import CandidateFormat, Workspace

REDUCED_PRECISION_REL_L2 = 1e-4  # fp32 arithmetic lands far below; tf32/bf16/fp16 above


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


class Evaluator:
    """Evaluates candidates for one task on one device. Validates the task once, when constructed."""

    def __init__(self, task: Task, device: DeviceInfo, options: EvalOptions | None = None):
        self.task, self.device = task, device
        self.options = options or EvalOptions()
        validate_task(task, device.kind)
        self.baselines = BaselineTimer(task, device, self.options.compile_mode, self.options.plan)

    # ----- build ------------------------------------------------------------------------------------------------

    def build(self, ws: Workspace) -> BuildResult:
        fmt = ws.candidate_format()
        if fmt is CandidateFormat.WORKSPACE:
            return build_workspace(ws, self.device, self.options.build_timeout_s)
        if fmt is CandidateFormat.PYTHON:
            return BuildResult(True, 0.0)
        return self._build_inline(ws)

    def _build_inline(self, ws: Workspace) -> BuildResult:
        """A single-file candidate builds itself on import (load_inline); do that once, in a child, with a limit."""
        start = time.monotonic()
        ws.inline_build_dir.mkdir(parents=True, exist_ok=True)
        try:
            with ChildProcess(extra_env=self._child_env(ws)) as child:
                reply = child.request(
                    {
                        "op": "load",
                        "model_new": str(ws.model_new_py),
                        "extensions_dir": str(ws.inline_build_dir),
                        "device": self.device.kind,
                        "import_only": True,
                    },
                    timeout_s=self.options.build_timeout_s,
                    what="building (importing model_new.py)",
                )
        except ChildFailure as f:
            code_ok = f.code != "TIMEOUT"
            return BuildResult(
                False, time.monotonic() - start, errors=f.message + _tail(f.output), timed_out=not code_ok
            )
        if not reply.get("ok", False):
            err = str(reply.get("error", ""))
            return BuildResult(False, time.monotonic() - start, errors=summarize_compiler_output(err, ws), log=err)
        return BuildResult(True, time.monotonic() - start)

    def _child_env(self, ws: Workspace) -> dict[str, str]:
        return {"TORCH_EXTENSIONS_DIR": str(ws.inline_build_dir)}

    # ----- evaluate ---------------------------------------------------------------------------------------------

    def evaluate(self, ws: Workspace, timing: bool | None = None) -> Verdict:
        timing = self.options.timing if timing is None else timing
        v = Verdict(task={"name": self.task.name, "sha256": self.task.sha256}, device=self.device.to_dict())
        t0 = time.monotonic()
        restored = ws.ensure_infrastructure(self.task.source)
        if restored:
            v.notes.append(f"restored fixed files that had been changed: {', '.join(restored)}")
        fmt = ws.candidate_format()
        v.candidate_format = fmt.value
        if not ws.model_new_py.is_file():
            v.reject("NO_MODELNEW", "the workspace has no model_new.py; write ModelNew there")
            return self._finish(v, t0)
        if self.options.audit_static:
            for violation in audit_model_new(ws.model_new_py.read_text(errors="replace")) + scan_files(
                ws.kernel_sources(), ws.root
            ):
                v.reject(violation.code, violation.message)
        v.seconds["audit"] = round(time.monotonic() - t0, 3)
        if v.violations:
            return self._finish(v, t0)
        build = self.build(ws)
        v.build = build.to_dict()
        v.seconds["build"] = round(build.seconds, 3)
        if not build.ok:
            v.reject("BUILD_TIMEOUT" if build.timed_out else "BUILD_FAILED", build.errors or "the build failed")
            return self._finish(v, t0)
        baselines = None
        if timing:
            baselines, baseline_notes = self.baselines.get()
            v.notes.extend(baseline_notes)
        t1 = time.monotonic()
        try:
            with ChildProcess(extra_env=self._child_env(ws)) as child:
                ref = self._run_trials(child, ws, v)
                v.seconds["verify"] = round(time.monotonic() - t1, 3)
                if v.correct and timing and ref is not None:
                    t2 = time.monotonic()
                    self._time(child, ref, baselines, v)
                    v.seconds["timing"] = round(time.monotonic() - t2, 3)
        except ChildFailure as f:
            v.reject(f.code, f.message + _tail(f.output))
        tampered = ws.tampered_infrastructure(self.task.source)
        if tampered:
            ws.ensure_infrastructure(self.task.source)
            v.reject("INFRA_TAMPERED", f"the candidate changed {', '.join(tampered)} while it ran (restored)")
        return self._finish(v, t0)

    def _finish(self, v: Verdict, t0: float) -> Verdict:
        if v.violations:
            v.correct = False
        t = v.time_ms
        v.set_times(t["eager"], t["compile"], t["candidate"] if v.correct else None, self.options.margin)
        v.seconds["total"] = round(time.monotonic() - t0, 3)
        return v

    # ----- trials -----------------------------------------------------------------------------------------------

    def _run_trials(self, child: ChildProcess, ws: Workspace, v: Verdict):
        """Returns the reference model matching the child's current weights (for timing re-checks)."""
        dev, tol = self.device.kind, self.options.tolerance
        ref = self.task.build_model(secrets.randbits(62), dev)
        init = self.task.init_inputs()
        load = {
            "op": "load",
            "model_new": str(ws.model_new_py),
            "device": dev,
            "init_inputs": init,
            "state_dict": _cpu_state(ref),
            "seed": secrets.randbits(31),
        }
        if ws.candidate_format() is CandidateFormat.WORKSPACE:
            load["build_dir"] = str(ws.build_dir)
        else:
            load["extensions_dir"] = str(ws.inline_build_dir)
        reply = child.request(load, timeout_s=self.options.build_timeout_s + 120, what="loading ModelNew")
        if not reply.get("ok", False):
            stage = reply.get("stage", "import")
            code = {"import": "IMPORT_FAILED", "init": "INIT_FAILED", "load_state_dict": "STATE_DICT_MISMATCH"}.get(
                stage, "IMPORT_FAILED"
            )
            if "defines no class ModelNew" in str(reply.get("error")):
                code = "NO_MODELNEW"
            v.reject(code, f"{_stage_text(stage)}: {_short(reply.get('error'))}")
            return None
        ext = Extension.from_reply(reply)
        if ext.defined is None and self.device.is_cuda:
            v.notes.append("nm was not found: the check that your own kernels ran was skipped")
        v.correct = True
        worst_rel_l2, fp32_outputs = 0.0, False
        first_out = None
        previous = None

        def trial(name: str, inputs, reuse: bool = False, observe: bool = False, model=None):
            nonlocal worst_rel_l2, fp32_outputs
            expected = self.task.run(model or ref, inputs)
            fp32_outputs = fp32_outputs or _has_fp32(expected)
            msg = {
                "op": "call",
                "inputs": [x.cpu() for x in inputs],
                "reuse": reuse,
                "observe_kernels": observe,
                "poison_nbytes": _nbytes_list(expected) + [x.numel() * x.element_size() for x in inputs],
            }
            reply = child.request(
                msg,
                timeout_s=self.options.call_timeout_s,
                max_bytes=16 * 1024 * 1024 + 2 * sum(_nbytes_list(expected)),
                what=f"trial {name}",
            )
            if not reply.get("ok", False):
                found, comparison = judge_failed_call(reply, name), None
            else:
                found, comparison = judge_call(reply, expected, name, tol, ext, self.device.is_cuda)
                worst_rel_l2 = max(worst_rel_l2, comparison.rel_l2)
            for f in found:
                v.reject(f.code, f.message)
            v.trials.append(
                Trial(
                    name,
                    not found,
                    comparison.max_abs_error if comparison else None,
                    comparison.worst_tolerance_ratio if comparison else None,
                    found[0].message if found else None,
                )
            )
            if comparison and (v.max_abs_error is None or comparison.max_abs_error > v.max_abs_error):
                v.max_abs_error = comparison.max_abs_error
            if reply.get("fatal"):
                raise _Stop()
            return reply.get("outputs") if reply.get("ok") else None

        try:
            stock_inputs = []
            for i in range(self.options.stock_trials):
                inputs = self.task.make_inputs(secrets.randbits(62), dev)
                out = trial(f"stock-{i + 1}", inputs, observe=(i == 0))
                stock_inputs.append(inputs)
                if i == 0:
                    first_out = out
            previous = self.task.make_inputs(secrets.randbits(62), dev)
            trial("mutation", previous, reuse=True)
            mutated, changed = sparse_mutation(previous, secrets.randbits(62))
            if changed:
                trial("sparse-mutation", mutated, reuse=True)
            again = trial("determinism", [x.clone() for x in stock_inputs[0]])
            if first_out is not None and again is not None:
                same = compare(first_out, again, tol, name="output", check_device=False)
                if not same.ok:
                    v.reject(
                        "NONDETERMINISTIC",
                        f"[determinism] the same inputs gave a different output than in "
                        f"stock-1: {same.violations[0].message}",
                    )
            self._stress_trial(trial, ref, v)
            randomized = self.task.build_model(secrets.randbits(62), dev)
            randomized.load_state_dict(randomized_state(ref, secrets.randbits(62)))
            reply = child.request({"op": "load_state", "state_dict": _cpu_state(randomized)}, timeout_s=120)
            if not reply.get("ok", False):
                v.reject("STATE_DICT_MISMATCH", f"[random-weights] {_short(reply.get('error'))}")
            else:
                ref = randomized
                trial("random-weights", self.task.make_inputs(secrets.randbits(62), dev), model=randomized)
        except _Stop:
            return None
        if v.correct and fp32_outputs and worst_rel_l2 > REDUCED_PRECISION_REL_L2:
            v.flags.append(
                f"REDUCED_PRECISION: relative L2 error {worst_rel_l2:.2e} suggests reduced-precision "
                "arithmetic (tf32, fp16 or bf16); the tolerance allows it"
            )
        return ref

    def _stress_trial(self, trial, ref, v: Verdict) -> None:
        """Stress inputs, falling back to milder ones where the reference itself stops being finite."""
        base = self.task.make_inputs(secrets.randbits(62), self.device.kind)
        stock_finite = _all_finite(self.task.run(ref, base))
        for mild in (False, True):
            inputs = stress_inputs(base, secrets.randbits(62), mild=mild)
            if not stock_finite or _all_finite(self.task.run(ref, inputs)):
                trial("stress" if not mild else "stress-mild", inputs)
                return
        v.notes.append("the stress trial was skipped: the reference is not finite on stressed inputs")

    # ----- timing -----------------------------------------------------------------------------------------------

    def _time(self, child: ChildProcess, ref, baselines: dict, v: Verdict) -> None:
        meas, found = time_candidate(
            child,
            self.task,
            ref,
            self.device,
            self.options.plan,
            self.options.tolerance,
            timeout_s=max(300.0, self.options.plan.max_seconds * 10),
        )
        for f in found:
            v.reject(f.code, f.message)
        if meas is None or not v.correct:
            return
        eager, compiled = (baselines[m].stats.median if baselines[m] else None for m in ("eager", "compile"))
        v.time_ms = {"eager": eager, "compile": compiled, "candidate": meas.stats.median}
        v.timing = {"candidate": meas.to_dict(), **{m: b.to_dict() if b else None for m, b in baselines.items()}}


class _Stop(Exception):
    """A trial hit a fatal error in the child; no further trials can run."""


def _cpu_state(model) -> dict:
    return {k: (v.detach().cpu() if hasattr(v, "detach") else v) for k, v in model.state_dict().items()}


def _nbytes_list(out) -> list[int]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out.numel() * out.element_size()]
    if isinstance(out, (list, tuple)):
        return [n for o in out for n in _nbytes_list(o)]
    return []


def _has_fp32(out) -> bool:
    import torch

    if isinstance(out, torch.Tensor):
        return out.dtype == torch.float32
    return isinstance(out, (list, tuple)) and any(_has_fp32(o) for o in out)


def _all_finite(out) -> bool:
    import torch

    if isinstance(out, torch.Tensor):
        return not out.is_floating_point() or bool(torch.isfinite(out).all())
    return all(_all_finite(o) for o in out) if isinstance(out, (list, tuple)) else True


def _stage_text(stage: str) -> str:
    return {
        "import": "importing model_new.py failed",
        "init": "ModelNew(*get_init_inputs()) failed",
        "load_state_dict": "ModelNew does not accept the reference's state_dict (strict)",
    }.get(stage, stage)


def _short(err, limit: int = 1500) -> str:
    text = str(err or "").strip()
    return text if len(text) <= limit else text[:limit] + " ..."


def _tail(output: str, limit: int = 1500) -> str:
    output = (output or "").strip()
    if not output:
        return ""
    return "\nlast output of the process:\n" + output[-limit:]
