"""One clock for every target: the tier compares the candidate's, eager's and torch.compile's time per call measured
the same way (per sample, the larger of the device time and the host's enqueue time), in the first measurement and
in the interleaved confirmation alike."""

from __future__ import annotations

from cudagent.device.info import DeviceInfo
from cudagent.evaluator.timing.baselines import Baseline, Measurement
from cudagent.evaluator.timing.measure import Plan
from cudagent.evaluator.timing.profile import Profiler
from cudagent.evaluator.verdict import Verdict

# A framework-bound baseline: its kernels take 0.010 ms, but a call takes 0.050 ms to enqueue, so a loop of calls
# runs at 0.050 ms a call. A candidate with one fused kernel and a thin host path: 0.030 ms a call either way.
HOST_BOUND = {"ms": [0.050] * 120, "device_ms": [0.010] * 120, "wall_ms": [0.050] * 120}
CANDIDATE = {"ms": [0.030] * 120, "device_ms": [0.030] * 120, "wall_ms": [0.030] * 120}


def test_a_baseline_is_compared_by_its_time_per_call_not_by_its_kernels_alone():
    baseline = Baseline(Measurement.of(HOST_BOUND))
    assert baseline.compared_ms == 0.050  # the same quantity the candidate's samples hold
    assert baseline.measurement.device.median == 0.010  # still reported, never compared


class FakeChild:
    """The candidate's process as the confirmation sees it: each timing request answers the candidate's samples."""

    def request(self, message, timeout_s, what):
        assert message["op"] == "time"
        return {"ok": True, **CANDIDATE}

    def cpu_seconds(self) -> float:
        return 0.0  # idle while the baselines run: no interference


class FakeBaselines:
    notes: list[str] = []

    def measure(self, target: str, plan: Plan) -> Measurement:
        return Measurement.of(HOST_BOUND)


def _profiler() -> Profiler:
    return Profiler(
        task=None,
        device=DeviceInfo(kind="cuda", name="test", torch_version="test"),
        baselines=FakeBaselines(),
        tolerance=None,
        plan=Plan(),
        margin=0.05,
    )


def test_the_confirmation_compares_the_baselines_by_the_same_clock():
    profiler = _profiler()
    cached = {t: Baseline(Measurement.of(HOST_BOUND)) for t in ("eager", "compile")}
    v = Verdict(correct=True)
    v.set_times(cached["eager"].compared_ms, cached["compile"].compared_ms, 0.030, 0.05)
    assert v.tier == 3  # 1.67x against both, on one clock (against their kernels alone it would be tier 1)
    profiler._confirm(FakeChild(), cached, v)
    confirmation = profiler.detail["confirmation"]
    assert confirmation["median_ms"] == {"candidate": 0.030, "eager": 0.050, "compile": 0.050}
    assert confirmation["round_median_ms"]["eager"] == [0.050] * 5
    assert confirmation["tier"] == 3 and v.tier == 3 and v.correct


def test_a_lower_tier_from_the_confirmation_says_what_it_measured():
    """The confirmation's tier wins when lower, and the note names the medians it compared (a bench report keeps
    the notes: without the figures a tier that changed between runs cannot be explained)."""
    profiler = _profiler()
    cached = {t: Baseline(Measurement.of(CANDIDATE)) for t in ("eager", "compile")}
    v = Verdict(correct=True)
    v.set_times(0.1, 0.1, 0.030, 0.05)  # as if the first measurement had seen slow baselines: tier 3
    assert v.tier == 3
    profiler._confirm(SlowChild(), cached, v)
    assert v.tier == 1
    (note,) = [n for n in v.notes if "interleaved confirmation" in n]
    assert "tier 1, not 3" in note and "candidate 0.0600 ms" in note and "eager 0.0500 ms" in note


class SlowChild(FakeChild):
    def request(self, message, timeout_s, what):
        return {"ok": True, "ms": [0.060] * 120, "device_ms": [0.060] * 120, "wall_ms": [0.060] * 120}
