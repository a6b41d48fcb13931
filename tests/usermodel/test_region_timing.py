"""Region times a ranking can trust (issue 48, point 3): a burst of the machine during one region's measurement
spoils one round, not its figure; parts that add up to far more than the whole are timed again, then noted."""

from __future__ import annotations

import time

import pytest
import torch

from cudagent.usermodel import region_timing
from cudagent.usermodel.region_timing import time_in_rounds


class Burst:
    """A region's call that costs `slow_ms` while the machine is busy (its calls `busy` after warm-up), else
    `fast_ms`: what another process's burst does to a region timed in one stretch."""

    def __init__(self, fast_ms: float, slow_ms: float, busy: range):
        self.fast, self.slow, self.busy, self.n = fast_ms, slow_ms, busy, 0

    def __call__(self):
        self.n += 1
        late = self.n - region_timing.WARMUP_CALLS - 1
        time.sleep((self.slow if late in self.busy else self.fast) / 1e3)


def test_a_burst_during_one_regions_measurement_spoils_a_round_not_its_figure():
    per_round = region_timing.CALLS_PER_ROUND
    burst = Burst(1.0, 40.0, range(per_round, 2 * per_round))  # every call of its second round
    steady = Burst(2.0, 2.0, range(0))
    (burst_rounds, steady_rounds), whole, note = time_in_rounds([burst, steady], None)
    assert burst_rounds.median < 5.0, burst_rounds  # one stretch of the same calls would say 40 ms
    assert burst_rounds.spread[1] > 30.0  # the burst is there to see, in the spread
    assert len(burst_rounds.ms) == 2 * region_timing.ROUNDS  # so spread out that it was timed again
    assert len(steady_rounds.ms) in (region_timing.ROUNDS, 2 * region_timing.ROUNDS)  # (a loaded machine's sleeps)
    assert 1.5 < steady_rounds.median < 4.0
    assert whole is None and note is None


def test_parts_far_above_the_whole_are_timed_again_then_noted():
    calls = [Burst(4.0, 4.0, range(0)) for _ in range(3)]  # 12 ms together
    whole = Burst(1.0, 1.0, range(0))
    parts, whole_rounds, note = time_in_rounds(calls, whole)
    assert [len(p.ms) for p in parts] == [2 * region_timing.ROUNDS] * 3  # timed again, interleaved
    assert note is not None and "add up to" in note and "uncertain" in note
    fine, _, none = time_in_rounds([Burst(0.5, 0.5, range(0))], Burst(2.0, 2.0, range(0)))
    assert none is None and len(fine[0].ms) >= region_timing.ROUNDS


@pytest.mark.slow
def test_a_region_report_carries_the_rounds_and_the_whole():
    from cudagent.usermodel.fusion import region_report

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.LayerNorm(64)).eval()
    report = region_report(model, (torch.randn(8, 64),), {}, "cpu", "tiny")
    assert report.whole_ms and report.whole_ms > 0
    assert all(k.spread and k.spread[0] <= k.ms <= k.spread[1] for k in report.kinds), report.to_dict()
    header, first = report.table()[:2]
    assert header[6] == "rounds" and "-" in first[6]
    assert "One call of the whole model" in report.markdown()
