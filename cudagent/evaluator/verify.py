"""The trials, run from the trusted parent against a candidate loaded in a child.

    stock-1..5       get_inputs() with fresh secret seeds (the last also records kernels and streams on CUDA: by
                     then the child's profiler warm-up, started with the child, is done)
    mutation         the same input buffers, new contents
    sparse-mutation  the same buffers, a small block changed
    determinism      stock-1's contents again, in fresh buffers: must match the reference and stock-1's output
    scaled           a stock draw under a secret scale and offset (transforms.py): a candidate that recognises
                     the stock distribution and behaves well only elsewhere cannot tell this one apart
    stress           heavy tails, other scale and offset, spikes, a comb (see trials.py)
    random-weights   every parameter and buffer redrawn, then a fresh stock draw

The reference model and its outputs never leave this process, and a trial's expected output is computed only
after the candidate has returned its own: while the candidate runs, the answer exists nowhere it could look.
"""

from __future__ import annotations

import secrets
import time

import torch

from cudagent.device.info import DeviceInfo
from cudagent.evaluator.compare import Tolerance, compare
from cudagent.evaluator.exact import exact_answer
from cudagent.evaluator.jail.process import ChildProcess
from cudagent.evaluator.judge import Extension, judge_call, judge_failed_call, judge_tampering
from cudagent.evaluator.transforms import InputSpec, secret_draw
from cudagent.evaluator.trials import sparse_mutation, stress_inputs
from cudagent.evaluator.verdict import Trial, Verdict
from cudagent.task import Task, randomized_state
from cudagent.trees import all_finite, clone, has_dtype, nbytes, nbytes_list, tensors

REDUCED_PRECISION_REL_L2 = 1e-4  # fp32 arithmetic lands far below; tf32/bf16/fp16 above
LOAD_STAGES = {
    "import": ("IMPORT_FAILED", "importing model_new.py failed"),
    "init": ("INIT_FAILED", "ModelNew(*get_init_inputs()) failed"),
    "load_state_dict": ("STATE_DICT_MISMATCH", "ModelNew does not accept the reference's state_dict (strict)"),
}


class _Stop(Exception):
    """A fatal error in the child (a sticky CUDA error): no further trial can run."""


class TrialRunner:
    def __init__(
        self,
        task: Task,
        device: DeviceInfo,
        child: ChildProcess,
        tolerance: Tolerance,
        call_timeout_s: float,
        verdict: Verdict,
        extension: Extension | None = None,
    ):
        self.task, self.device, self.child, self.tol = task, device, child, tolerance
        self.call_timeout_s, self.v = call_timeout_s, verdict
        self.ext = extension
        self.worst_rel_l2, self.fp32_outputs = 0.0, False
        self.judged_by_answer: list[str] = []  # trials that missed the half-precision reference, not its answer
        self.out_bytes: list[int] = []

    def run(self, handin: str, stock_trials: int, load_timeout_s: float):
        """Load the candidate and run every trial; return the reference model matching the child's weights, or
        None when the candidate could not be loaded or a fatal error stopped the trials."""
        dev = self.device.kind
        ref = self.task.build_model(secrets.randbits(62), dev)
        # The sizes of the outputs (for poisoning free memory), from a draw that is never sent anywhere.
        probe_inputs = self.task.make_inputs(secrets.randbits(62), dev)
        probe = self.task.run(ref, probe_inputs)
        self.out_bytes = nbytes_list(probe)
        # Inputs go to the child and outputs come back through shared memory (one message at a time holds it).
        self.child.use_arena(max(nbytes(probe_inputs), sum(self.out_bytes)), dev)
        del probe, probe_inputs
        if not self._load(handin, ref, load_timeout_s):
            return None
        self.v.correct = True
        try:
            stock = [self.task.make_inputs(secrets.randbits(62), dev) for _ in range(stock_trials)]
            first = self._call("stock-1", stock[0], ref, observe=stock_trials == 1)
            for i in range(1, stock_trials):
                self._call(f"stock-{i + 1}", stock[i], ref, observe=i == stock_trials - 1)
            current = self.task.make_inputs(secrets.randbits(62), dev)
            self._call("mutation", current, ref, reuse=True)
            mutated, changed = sparse_mutation(current, secrets.randbits(62))
            if changed:
                self._call("sparse-mutation", mutated, ref, reuse=True)
            again = self._call("determinism", [clone(x) for x in stock[0]], ref)
            if first is not None and again is not None:
                same = compare(first, again, self.tol, name="output", check_device=False)
                if not same.ok:
                    self.v.reject(
                        "NONDETERMINISTIC",
                        f"[determinism] the same inputs gave a different output than "
                        f"in stock-1: {same.violations[0].message}",
                    )
            base = self.task.make_inputs(secrets.randbits(62), dev)
            self._call("scaled", InputSpec.of(base).apply(base, secret_draw(len(base))), ref)
            self._stress(ref)
            ref = self._random_weights(ref)
        except _Stop:
            return None
        if self.judged_by_answer:
            self.v.notes.append(
                f"{', '.join(self.judged_by_answer)}: beyond the tolerance of the half-precision reference, but no "
                "farther from its fp32 answer than the reference itself (plus the tolerance)"
            )
        if self.v.correct and self.fp32_outputs and self.worst_rel_l2 > REDUCED_PRECISION_REL_L2:
            self.v.flags.append(
                f"REDUCED_PRECISION: relative L2 error {self.worst_rel_l2:.2e} suggests "
                "reduced-precision arithmetic (tf32, fp16 or bf16); the tolerance allows it"
            )
        return ref

    def _load(self, handin: str, ref, timeout_s: float) -> bool:
        msg = load_message(self.task, handin, self.device, ref)
        start = time.monotonic()
        reply = self.child.request(msg, timeout_s=timeout_s, what="loading ModelNew")
        self.v.seconds["load"] = round(time.monotonic() - start, 3)
        if not reply.get("ok", False):
            code, text = LOAD_STAGES.get(reply.get("stage"), LOAD_STAGES["import"])
            if "defines no class ModelNew" in str(reply.get("error")):
                code = "NO_MODELNEW"
            self.v.reject(code, f"{text}: {_short(reply.get('error'))}")
            return False
        for f in judge_tampering(reply, "load"):
            self.v.reject(f.code, f.message)
        return not self.v.violations

    def _call(self, name: str, inputs: list, model, reuse: bool = False, observe: bool = False):
        start = time.monotonic()
        msg = {
            "op": "call",
            "inputs": inputs,  # copied into the arena (or onto the socket) as they are sent
            "reuse": reuse,
            "observe_kernels": observe,
            "poison_nbytes": self.out_bytes + nbytes_list(inputs),
        }
        reply = self.child.request(
            msg, timeout_s=self.call_timeout_s, max_bytes=(16 << 20) + 2 * sum(self.out_bytes), what=f"trial {name}"
        )
        answered = time.monotonic()
        expected = self.task.run(model, inputs)  # only now: the candidate's output is already here
        self.fp32_outputs = self.fp32_outputs or has_dtype(expected, torch.float32)
        comparison = None
        if not reply.get("ok", False):
            found = judge_failed_call(reply, name)
        else:
            found, comparison = judge_call(
                reply,
                expected,
                name,
                self.tol,
                self.ext,
                self.device.is_cuda,
                lambda: exact_answer(self.task, model, inputs),
            )
            if comparison.against_answer and comparison.ok:
                self.judged_by_answer.append(name)
            self.worst_rel_l2 = max(self.worst_rel_l2, comparison.rel_l2)
        for f in found:
            self.v.reject(f.code, f.message)
        self.v.trials.append(
            Trial(
                name,
                not found,
                comparison.max_abs_error if comparison else None,
                comparison.worst_tolerance_ratio if comparison else None,
                found[0].message if found else None,
                round(time.monotonic() - start, 4),
            )
        )
        self._spent("verify_candidate_calls", answered - start)  # inputs there, the call, outputs back
        self._spent("verify_reference_and_compare", time.monotonic() - answered)
        if comparison and (self.v.max_abs_error is None or comparison.max_abs_error > self.v.max_abs_error):
            self.v.max_abs_error = comparison.max_abs_error
        if reply.get("fatal"):
            raise _Stop()
        return reply.get("outputs") if reply.get("ok") else None

    def _spent(self, part: str, seconds: float) -> None:
        """Where a verification's time goes, summed over its trials, beside the phases in `Verdict.seconds`."""
        self.v.seconds[part] = round(self.v.seconds.get(part, 0.0) + seconds, 3)

    def _stress(self, ref) -> None:
        """Stress inputs, falling back to milder ones where the reference itself stops being finite."""
        base = self.task.make_inputs(secrets.randbits(62), self.device.kind)
        stock_finite = all_finite(self.task.run(ref, base))
        for mild in (False, True):
            inputs = stress_inputs(base, secrets.randbits(62), mild=mild)
            if not stock_finite or _finite_then_scrubbed(self.task.run(ref, inputs)):
                self._call("stress-mild" if mild else "stress", inputs, ref)
                return
        self.v.notes.append("the stress trial was skipped: the reference is not finite on stressed inputs")

    def _random_weights(self, ref):
        randomized = self.task.build_model(secrets.randbits(62), self.device.kind)
        randomized.load_state_dict(randomized_state(ref, secrets.randbits(62)))
        reply = self.child.request({"op": "load_state", "state_dict": cpu_state(randomized)}, timeout_s=120)
        if not reply.get("ok", False):
            self.v.reject("STATE_DICT_MISMATCH", f"[random-weights] {_short(reply.get('error'))}")
            return ref
        self._call("random-weights", self.task.make_inputs(secrets.randbits(62), self.device.kind), randomized)
        return randomized


def _finite_then_scrubbed(expected) -> bool:
    """Whether the reference's output is finite; the output itself is then zeroed, so that the answer to inputs
    about to be sent does not sit in this process's memory while the candidate runs."""
    finite = all_finite(expected)
    for t in tensors(expected):
        t.zero_()
    return finite


def load_message(task: Task, handin: str, device: DeviceInfo, ref) -> dict:
    """The request that makes a child import model_new.py from the hand-in `handin` (as the child sees it) and build
    ModelNew with the reference's weights."""
    return {
        "op": "load",
        "handin": handin,
        "device": device.kind,
        "init_inputs": task.init_inputs(),
        "state_dict": cpu_state(ref),
        "seed": secrets.randbits(31),
    }


def cpu_state(model) -> dict:
    return {k: (v.detach().cpu() if hasattr(v, "detach") else v) for k, v in model.state_dict().items()}


def _short(err, limit: int = 1500) -> str:
    text = str(err or "").strip()
    return text if len(text) <= limit else text[:limit] + " ..."
