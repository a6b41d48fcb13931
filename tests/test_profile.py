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


def test_a_stale_cached_baseline_is_measured_again(tmp_path):
    import shutil

    cand = tmp_path / "candidate"
    shutil.copytree(ROOT / "tests/adversarial/kernels/cpu", cand / "kernels")
    shutil.copy(ROOT / "tests/adversarial/cases/control_inplace_on_own_output/model_new.py", cand / "model_new.py")
    env = dict(os.environ, CUDAGENT_CACHE_DIR=str(tmp_path / "cache"))
    args = [
        sys.executable,
        "-m",
        "cudagent",
        "profile",
        "tests/adversarial/tasks/vadd.py",
        str(cand),
        "--device",
        "cpu",
        "--json",
    ]
    first = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert first.returncode == 0, first.stderr
    honest = json.loads(first.stdout)["time_ms"]["eager"]
    for path in (tmp_path / "cache" / "baselines").glob("*.json"):  # as if measured on a very busy machine
        data = json.loads(path.read_text())
        for key in ("median", "p10", "p90", "mean"):
            data["event_ms"][key] *= 50
        path.write_text(json.dumps(data))
    second = json.loads(subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900).stdout)
    assert any("was stale" in note for note in second["notes"]), second["notes"]
    assert second["time_ms"]["eager"] < 10 * honest
    assert not any(f.startswith("SPEEDUP_OVER_10X") for f in second["flags"])
