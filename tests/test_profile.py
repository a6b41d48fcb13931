"""`cudagent profile` on the CPU: per-target statistics, the roofline against measured peaks, the text report."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_profile_json_and_text(tmp_path):
    env = dict(os.environ, CUDAGENT_CACHE_DIR=str(tmp_path))
    args = [
        sys.executable,
        "-m",
        "cudagent",
        "profile",
        "examples/tasks/axpby.py",
        "examples/solutions/cpu/axpby",
        "--device",
        "cpu",
    ]
    proc = subprocess.run(args + ["--json", "--ncu"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)
    timing = verdict["timing"]
    for target in ("candidate", "eager", "compile"):
        stats = timing["targets"][target]["event_ms"]
        assert stats["samples"] >= 100 and stats["p10"] <= stats["median"] <= stats["p90"]
    roofline = timing["roofline"]
    assert roofline["cost"]["bytes"] == 3 * (1 << 24) * 4 and roofline["peaks"]["bandwidth_gbs"] > 0
    assert 0 < roofline["candidate"]["bandwidth_pct"]
    assert timing["protocol"]["rechecked_samples"] and timing["checks"]["request_s"] > 0
    assert any("Nsight Compute summary needs a CUDA device" in n for n in verdict["notes"])
    text = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert lines[0].startswith("CORRECT (tier ")
    assert any(ln.strip().startswith("candidate:") for ln in lines) and any("roofline:" in ln for ln in lines)
