"""`cudagent profile --ncu` on the GPU: kernel breakdowns (own kernels marked), roofline, Nsight Compute summary."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.serial
def test_profile_with_ncu_on_gpu():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cudagent",
            "profile",
            "examples/tasks/layernorm.py",
            "examples/solutions/cuda/layernorm",
            "--json",
            "--ncu",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    verdict = json.loads(proc.stdout)
    timing = verdict["timing"]
    print(
        json.dumps(
            {
                "tier": verdict["tier"],
                "time_ms": verdict["time_ms"],
                "checks": timing["checks"],
                "roofline": timing["roofline"]["candidate"],
                "kernels": timing["kernels"]["candidate"],
                "ncu": timing.get("ncu"),
                "notes": verdict["notes"],
            },
            indent=1,
        )
    )
    kernels = timing["kernels"]["candidate"]
    assert kernels and kernels[0]["own"] is True and "layernorm_rows" in kernels[0]["name"]
    assert timing["kernels"]["compile"], "the compiled baseline's kernels are listed too"
    assert timing["roofline"]["peaks"]["bandwidth_gbs"] > 1000
    assert 0 < timing["roofline"]["candidate"]["bandwidth_pct"] < 150
    assert timing["checks"]["kernel_ms_per_call"] <= 1.2 * verdict["time_ms"]["candidate"] + 0.01
    ncu = timing["ncu"]
    assert ncu and ncu[0]["duration_us"] > 0 and ncu[0]["achieved_occupancy"] is not None


def test_peaks_are_plausible_for_the_gpu():
    from cudagent.device.info import resolve_device
    from cudagent.evaluator.timing.peaks import device_peaks

    peaks = device_peaks(resolve_device("cuda"))
    print(peaks)
    assert peaks.bandwidth_gbs > 1000 and peaks.bf16_tflops > peaks.fp32_tflops > 1
