"""Parsing Nsight Compute's CSV, and rendering verdicts as text for people and agents."""

from cudagent.evaluator.timing.ncu import METRICS, STALL_METRIC, parse_ncu_csv
from cudagent.evaluator.verdict import Verdict, Violation


def test_parse_ncu_raw_csv():
    metrics = list(METRICS.values()) + [STALL_METRIC.format("long_scoreboard"), STALL_METRIC.format("barrier")]
    header = ['"ID"', '"Kernel Name"'] + [f'"{m}"' for m in metrics]
    units = ['""', '""'] + ['"x"'] * len(metrics)
    values = ["12500", "71.5", "88.25", "80.1", "45.5", "50", "32", "1,024", "256", "9.5", "1.25"]
    row = ['"0"', '"void softmax_rows<512>(float*, const float*, long)"'] + [f'"{x}"' for x in values]
    text = "==PROF== Connected to process\n" + "\n".join(",".join(r) for r in (header, units, row)) + "\n"
    (k,) = parse_ncu_csv(text)
    assert k["name"].startswith("void softmax_rows") and k["duration_us"] == 12.5
    assert k["memory_pct"] == 88.25 and k["grid"] == 1024 and k["registers"] == 32
    assert k["top_stalls"][0] == ("long_scoreboard", 9.5)


def test_parse_ncu_without_rows():
    assert parse_ncu_csv("==PROF== nothing profiled\n") == []


def test_rejected_verdict_text():
    v = Verdict()
    v.reject("OUTPUT_MISMATCH", "[stock-1] output: 3 of 9 values differ")
    v.reject("OUTPUT_MISMATCH", "[stress] output: 3 of 9 values differ")
    text = v.summary()
    assert text.splitlines()[0] == "REJECTED (tier -1: the reward for a wrong or cheating candidate)"
    assert "[OUTPUT_MISMATCH] [stock-1, stress] output: 3 of 9 values differ" in text


def test_correct_verdict_text_with_detail():
    v = Verdict(correct=True)
    v.set_times(2.0, 1.5, 1.0)
    v.timing = {
        "targets": {
            t: {"event_ms": {"median": m, "p10": m, "p90": m, "samples": 100}}
            for t, m in (("candidate", 1.0), ("eager", 2.0), ("compile", 1.5))
        },
        "roofline": {
            "cost": {"bytes": 3_000_000_000, "flops": 0},
            "peaks": {"bandwidth_gbs": 3000.0},
            "floor_ms": 1.0,
            "floor_applies": True,
            "candidate": {
                "bandwidth_gbs": 3000.0,
                "bandwidth_pct": 100.0,
                "tflops": 0.0,
                "fp32_pct": 0.0,
                "bound": "memory",
            },
        },
        "kernels": {
            "candidate": [
                {"name": "mine", "ms_per_call": 1.0, "share_pct": 100.0, "launches_per_call": 1, "own": True}
            ],
            "compile": None,
        },
    }
    text = v.summary(detail=True)
    assert text.startswith("CORRECT (tier 3: correct and faster than both eager and torch.compile)")
    assert "2.00x vs eager, 1.50x vs torch.compile" in text and "100% of 3000 GB/s" in text
    assert "mine [yours]" in text
    assert "roofline" not in v.summary()  # the short form stays short


def test_violation_codes_are_known():
    import pytest

    with pytest.raises(ValueError):
        Violation("NOT_A_CODE", "x")
