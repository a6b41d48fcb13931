"""The reward's clock (parent_clock.py): how long a batch is, and what its checksum must agree with."""

from __future__ import annotations

import torch

from cudagent.evaluator.timing.parent_clock import (
    BATCH_FLOOR_MS,
    MAX_CALLS,
    batch_ms_wanted,
    calls_for,
    checksums,
    sums_disagree,
)

ELEMENTWISE = lambda dtype: (1e-2, 1e-2)  # noqa: E731  (compare.py's float32 default)
EXACT = lambda dtype: (0.0, 0.0)  # noqa: E731


def test_a_batch_lasts_a_hundred_round_trips_and_grows_at_most_tenfold_per_try():
    assert batch_ms_wanted(2.0) == 200.0 and batch_ms_wanted(0.01) == BATCH_FLOOR_MS
    assert calls_for(3, took_ms=2.1, round_trip_ms=2.0) == 30  # 0.1 ms of calls: no jump to thousands on noise
    n, took = 3, 2.1
    while (more := calls_for(n, took, 2.0)) is not None:  # calls of 0.05 ms each, a round trip of 2 ms
        n, took = more, 2.0 + 0.05 * more
    assert took >= 200.0 and 2.0 / took <= 0.01 and n <= 1.3 * 200 / 0.05
    assert calls_for(4, took_ms=500.0, round_trip_ms=2.0) is None  # long enough already
    assert calls_for(MAX_CALLS, took_ms=1.0, round_trip_ms=0.5) is None


def test_a_checksum_is_the_sum_of_the_outputs_within_what_their_elements_may_differ_by():
    out = (torch.randn(1000), torch.arange(10))
    sums = checksums(out)
    assert sums_disagree(sums, out, EXACT) is None
    nudged = (out[0] + 1e-3, out[1])  # every element within the elementwise tolerance
    assert sums_disagree(sums, nudged, ELEMENTWISE) is None
    assert "is not its sum" in sums_disagree(sums, (out[0] + 1.0, out[1]), ELEMENTWISE)
    assert "is not its sum" in sums_disagree([sums[0] + 1.0, sums[1]], out, EXACT)
    assert "2 checksums for 1 outputs" in sums_disagree(sums, out[0], EXACT)
    assert "no checksums" in sums_disagree(None, out, EXACT)
    assert "not a number" in sums_disagree(["1.0", sums[1]], out, EXACT)


def test_a_non_finite_output_needs_a_non_finite_checksum():
    out = torch.tensor([1.0, float("nan")])
    assert sums_disagree([float("nan")], out, EXACT) is None
    assert "finite where the output's sum is not" in sums_disagree([1.0], out, EXACT)
    assert "is not its sum" in sums_disagree([float("inf")], torch.ones(3), EXACT)


def test_a_batch_is_checked_at_a_call_held_after_it_returned_not_only_at_its_last(tmp_path):
    """BatchCheck (timing/batch_check.py) with the outputs a child's `batch` op gives (parent_clock.run_calls, the
    reference itself as the candidate): a right batch passes; one whose held call is wrong (a candidate that does
    the work only on the calls it can tell are looked at) or that holds fewer calls than asked is refused."""
    import pytest

    from cudagent.evaluator.compare import Tolerance
    from cudagent.evaluator.timing.batch_check import BatchCheck
    from cudagent.evaluator.timing.parent_clock import BatchRefused, run_calls
    from cudagent.evaluator.transforms import InputSpec
    from cudagent.evaluator.verdict import Verdict
    from cudagent.task import load_task

    source = tmp_path / "task.py"
    source.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, a, b):\n        return 2 * a + b\n"
        "def get_inputs():\n    return [torch.randn(256), torch.randn(256)]\ndef get_init_inputs():\n    return []\n"
    )
    task = load_task(source)
    ref = task.build_model(1, "cpu")
    sets = [task.make_inputs(s, "cpu") for s in (2, 3)]
    specs = [InputSpec.of(s) for s in sets]

    class Child:  # what the child's batch_output op answers: its last outputs and the calls it held
        def __init__(self, reply):
            self.reply = reply

        def request(self, msg, **_):
            return {"ok": True, **self.reply}

    def batch(n: int, seed: int, wrong: bool = False, keep: int = 1):
        work = [[x.clone() for x in s] for s in sets]
        out, k, kept = run_calls(lambda a, b: task.run(ref, [a, b]), work, sets, specs, seed, n, keep=keep)
        held = {str(c): {"set": s, "outputs": o + 1.0 if wrong else o} for c, (s, o) in kept.items()}
        sent = {"n": n, "seed": seed, "keep": 1}
        reply = {"ok": True, "n": n, "set": k, "checksum": checksums(out)}
        return sent, reply, Child({"outputs": out, "kept": held})

    tolerance = Tolerance()
    sent, reply, child = batch(7, 11)
    v = Verdict(correct=True)
    BatchCheck(task, ref, sets, specs, tolerance, child, v)("candidate", sent, reply)
    assert v.correct
    for why, made in (("call", batch(7, 12, wrong=True)), ("did not come back", batch(7, 13, keep=0))):
        v = Verdict(correct=True)
        with pytest.raises(BatchRefused, match=why):
            BatchCheck(task, ref, sets, specs, tolerance, made[2], v)("candidate", made[0], made[1])
        assert v.codes == ["TIMED_OUTPUT_MISMATCH"]
