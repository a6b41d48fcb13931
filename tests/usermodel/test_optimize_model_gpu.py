"""`cudagent optimize --hf DIR` on the GPU: a GPT-2-class model (GPT-2 small's widths, two layers) built from a
config, profiled, its top spots extracted, the scripted policy playing known-good CUDA kernels (cuda_kernels.py),
the kernels that beat their modules put back and the end-to-end report with measured and predicted speedups. Its
record is printed for the committed log (benchmarks/results/gpu-usermodel.txt)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.agent.episodes import cli_env
from tests.agent.script_server import ScriptedServer
from tests.usermodel.cuda_kernels import solve


@pytest.mark.serial
def test_a_gpt2_class_model_from_a_config_is_optimized_and_put_back(tmp_path):
    from transformers import GPT2Config

    directory = tmp_path / "gpt2-class"
    GPT2Config(n_layer=2, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257).save_pretrained(directory)
    with ScriptedServer(solve) as server:
        env = cli_env(tmp_path / "home", server.url)
        # stderr (the profile, each spot's progress, the proof) streams into the log as it comes (pytest -s)
        done = subprocess.run(
            [sys.executable, "-m", "cudagent", "optimize", "--hf", str(directory)]
            + [
                "--inputs",
                "input_ids=i64[8,512]<50257",
                "--top",
                "4",
                "--max-turns",
                "10",
                "--json",
                "--by",
                "modules",
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            timeout=1800,
        )
    assert done.returncode == 0, done.stdout[-3000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({k: record.get(k) for k in ("run_id", "model", "inputs", "device", "wall_ms", "spots")}, indent=1))
    print(json.dumps(record.get("result"), indent=1, default=str))
    report = record["result"].get("package")
    if report:
        from pathlib import Path

        print((Path(report).parent / "report.md").read_text())
    for spot in record["spots"]:  # an episode that ended without a kernel: its turns, for the log
        if spot.get("run_id") and spot.get("outcome") != "kernel":
            lines = (tmp_path / "home" / "runs" / spot["run_id"] / "trajectory.jsonl").read_text().splitlines()
            print(f"--- {spot['spot']}: {spot.get('outcome')}; its turns:")
            for line in lines[1:]:
                print(line[:2500])
    verified = [s for s in record["spots"] if (s.get("tier") or -1) >= 1]
    assert any(s["kind"] == "Conv1D" for s in verified), record["spots"]  # transformers' own module, as a task
    kernels = [s for s in verified if s["outcome"] == "kernel"]
    assert kernels and all((s["tier"] >= 2) == (s in kernels) for s in verified), record["spots"]  # faster ones only
    result = record["result"]
    assert result["correct"] is True, result
    assert result["timing"]["speedup_vs_eager"] > 0 and result["predicted_speedup_vs_eager"] > 0, result
