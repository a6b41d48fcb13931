"""On the GPU: a scripted episode writes a real CUDA kernel for an example task, profiles it, and commits a tier-3
improvement with its trailers; the final re-evaluation from pristine files agrees. Set CUDAGENT_EPISODE_LOG to a
path to keep a readable log of the episode (the device run commits it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.agent.episodes import REPO, cli_env, cudagent, git, summary
from tests.agent.script_server import ScriptedServer, from_list

pytestmark = pytest.mark.serial  # it times kernels: alone on the GPU

SOLUTION = REPO / "examples" / "solutions" / "cuda" / "scale_shift_tanh"


def _write_steps() -> list[dict]:
    steps = [{"tool": "read_file", "arguments": {"path": "model.py"}}]
    for path in sorted(SOLUTION.rglob("*")):
        if path.is_file():
            rel = str(path.relative_to(SOLUTION))
            steps.append({"tool": "write_file", "arguments": {"path": rel, "content": path.read_text()}})
    return steps + [
        {"tool": "compile", "arguments": {}},
        {"tool": "profile", "arguments": {}},
        {"tool": "finish", "arguments": {"summary": "fused scale, shift and tanh in one pass"}},
    ]


def test_scripted_cuda_episode_commits_a_tier_3_kernel(tmp_path):
    task = tmp_path / "scale_shift_tanh.py"
    shutil.copy(REPO / "examples" / "tasks" / "scale_shift_tanh.py", task)
    env = cli_env(tmp_path / "home", None)
    steps = _write_steps()
    with ScriptedServer(from_list(steps)) as server:
        env.update(OPENAI_BASE_URL=server.url, OPENAI_API_KEY="test-key")
        proc = cudagent(["optimize", str(task), "--device", "cuda", "--json"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    log_text = [f"summary: {s}", git(s["repo"], "log", "--stat", "--format=%n%H%n%B", s["branch"])]
    log_text += [
        cudagent(["log", s["run_id"]], env).stdout,
        cudagent(["show", s["run_id"], str(len(steps) - 1)], env).stdout,
    ]
    if os.environ.get("CUDAGENT_EPISODE_LOG"):
        Path(os.environ["CUDAGENT_EPISODE_LOG"]).write_text("\n".join(log_text))
    assert s["exit_reason"] == "finished" and s["turns"] == len(steps)
    best = s["best"]
    assert best["in_run"]["tier"] == 3, log_text
    msg = git(s["repo"], "log", "-1", "--format=%B", best["commit"])
    assert "Cudagent-Tier: 3" in msg and "Cudagent-GPU: NVIDIA" in msg and "Cudagent-Model: scripted-model" in msg
    assert git(s["repo"], "rev-parse", f"{s['branch']}/best").strip() == best["commit"]
    assert s["final"]["correct"] is True and s["final"]["tier"] >= 2
