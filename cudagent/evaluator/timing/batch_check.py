"""What a candidate's batch of calls (parent_clock.py) must show before its time or its sampled CPU time counts: the
work done on every call, not only on the calls it can tell are looked at.

A batch reports the float64 sums of its last call's outputs; they must be the sums of the reference's outputs on that
call's inputs, replayed here. Then the outputs are fetched and compared element by element: the last call's (for
every batch whose outputs are small, else for a batch in two, chosen after it replied) and those of the calls the
child held, each chosen only after its call had returned (parent_clock.run_calls), so that no call of a batch can
skip its work unseen. A batch that fails is refused (BatchRefused) after `wrong(why)` recorded why.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from cudagent.evaluator.compare import Tolerance
from cudagent.evaluator.exact import checksum_slack, exact_answer, has_half, judged
from cudagent.evaluator.judge import judge_tampering
from cudagent.evaluator.timing.parent_clock import BatchRefused, sums_disagree
from cudagent.evaluator.transforms import InputSpec, ParamStream
from cudagent.evaluator.verdict import Verdict
from cudagent.task import Task
from cudagent.trees import nbytes

KEEP = 1  # calls a candidate's batch holds besides its last, chosen after each returned
FETCH_ALWAYS_BYTES = 64 << 20  # a batch's outputs up to this size are read back after every batch


@dataclass
class BatchCheck:
    """ParentClock's `check` for a candidate's batches (other targets pass unchecked: they are the evaluator's)."""

    task: Task
    ref_model: object
    sets: list
    specs: list[InputSpec]
    tolerance: Tolerance
    child: object
    v: Verdict
    code: str = "TIMED_OUTPUT_MISMATCH"
    where: str = "timing, parent clock"

    def __call__(self, name: str, sent: dict, reply: dict) -> None:
        if name != "candidate":
            return
        for f in judge_tampering(reply, self.where.split(",")[0]):
            self.v.reject(f.code, f.message)
        if not self.v.correct:
            raise BatchRefused("the candidate's process was tampered with during a batch")
        n = int(sent["n"])
        inputs = self._replayed(int(sent["seed"]), n)
        last = n - 1
        if reply.get("n") != n or (n and reply.get("set") != inputs[last][0]):
            self.wrong("the batch's reply does not describe the calls it was asked for")
        if n == 0:
            return
        expected = self._reference(inputs[last])
        why = sums_disagree(reply.get("checksum"), expected, self.tolerance.for_dtype)
        exact = self._answer(inputs[last]) if why and has_half(expected) else None
        if exact is not None:  # the half-precision reference's own error allowed, as exact.judged allows it
            why = sums_disagree(reply.get("checksum"), exact, self.tolerance.for_dtype, checksum_slack(expected, exact))
        if why:
            self.wrong(why)
        if nbytes(expected) > FETCH_ALWAYS_BYTES and secrets.randbelow(2):
            return
        fetched = self.child.request(
            {"op": "batch_output"},
            timeout_s=300,
            max_bytes=(64 << 20) + 2 * (1 + KEEP) * nbytes(expected),
            what="fetching the batch's outputs",
        )
        if not fetched.get("ok", False):
            self.wrong(f"its outputs could not be read back: {fetched.get('error')}")
        self._compare(last, expected, fetched.get("outputs"), inputs[last])
        why = sums_disagree(reply.get("checksum"), fetched.get("outputs"), lambda _: (0.0, 0.0))
        if why:
            self.wrong(why)
        kept = fetched.get("kept")
        if not isinstance(kept, dict) or len(kept) != min(n, int(sent.get("keep", 0))):
            self.wrong("the calls the batch was to hold did not come back")
        for index, item in kept.items():
            c = int(index) if str(index).isdigit() else -1
            if not 0 <= c < n or not isinstance(item, dict) or item.get("set") != inputs[c][0]:
                self.wrong("the calls the batch held came back mislabeled")
            self._compare(c, self._reference(inputs[c]), item.get("outputs"), inputs[c])

    def _replayed(self, seed: int, n: int) -> list[tuple[int, list]]:
        """(set, draw) of every call of the batch, from the stream it was sent."""
        stream, calls = ParamStream(seed), []
        for c in range(n):
            k = c % len(self.sets)
            calls.append((k, stream.next(len(self.sets[k]))))
        return calls

    def _reference(self, call: tuple[int, list]):
        k, draw = call
        return self.task.run(self.ref_model, self.specs[k].apply(self.sets[k], draw))

    def _answer(self, call: tuple[int, list]):
        k, draw = call
        return exact_answer(self.task, self.ref_model, self.specs[k].apply(self.sets[k], draw))

    def _compare(self, c: int, expected, outputs, call: tuple[int, list]) -> None:
        result = judged(expected, outputs, self.tolerance, lambda: self._answer(call))
        if not result.ok:
            self.wrong(f"call {c}: {result.violations[0].message}")

    def wrong(self, why: str) -> None:
        self.v.reject(self.code, f"[{self.where}] {why}; outputs must stay right on every call")
        raise BatchRefused(why)
