"""`cudagent check` end to end on the GPU, timing included: one JSON object, exit 0, a tier from real timings."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_check(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "cudagent", "check", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )


@pytest.mark.serial
def test_check_json_with_timing_on_gpu():
    proc = run_check("examples/tasks/softmax.py", "examples/solutions/cuda/softmax", "--json")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    verdict = json.loads(proc.stdout)
    print(json.dumps({k: verdict[k] for k in ("tier", "time_ms", "speedup_vs_eager", "speedup_vs_compile")}))
    assert verdict["correct"] is True and verdict["tier"] in (1, 2, 3)
    assert all(isinstance(verdict["time_ms"][k], float) for k in ("eager", "compile", "candidate"))
    assert verdict["speedup_vs_eager"] > 0


def test_check_rejects_on_gpu_with_exit_1():
    proc = run_check(
        "tests/adversarial/tasks/vadd.py", "tests/adversarial/cases/torch_passthrough", "--json", "--no-timing"
    )
    assert proc.returncode == 1
    verdict = json.loads(proc.stdout)
    assert verdict["tier"] == -1 and "TORCH_OP_IN_FORWARD" in [v["code"] for v in verdict["violations"]]
