"""Shared pieces of the agent tests: a small task, its C++ solution as tool calls, and running the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TASK = '''"""alpha * a + b on small vectors."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.alpha * a + b


def get_inputs():
    return [torch.randn(4096), torch.randn(4096)]


def get_init_inputs():
    return [2.0]
'''

SOLUTION = REPO / "examples" / "solutions" / "cpu" / "axpby"
KERNEL = (SOLUTION / "kernels" / "axpby_cpu.cpp").read_text()
MODEL_NEW = (SOLUTION / "model_new.py").read_text()
WRONG_MODEL_NEW = MODEL_NEW.replace("axpby_forward(a, b, self.alpha)", "axpby_forward(a, b, self.alpha + 1.0)")

SOLVE = [
    {"tool": "read_file", "arguments": {"path": "model.py"}},
    {"tool": "write_file", "arguments": {"path": "kernels/axpby_cpu.cpp", "content": KERNEL}},
    {"tool": "write_file", "arguments": {"path": "model_new.py", "content": MODEL_NEW}},
    {"tool": "compile", "arguments": {}},
    {"tool": "verify", "arguments": {}},
]
FINISH = {"tool": "finish", "arguments": {"summary": "axpby in one OpenMP pass"}}


def write_task(directory: Path, name: str = "axpby_small.py") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(TASK)
    return path


def axpby_workspace(tmp_path: Path):
    """(task, workspace): the small axpby task and a workspace holding the CPU example's solution (tests that time
    nothing, or little)."""
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for

    task = load_task(write_task(tmp_path / "task"))
    return task, workspace_for(resolve_candidate(REPO / "examples" / "solutions" / "cpu" / "axpby"), task.source)


def cli_env(home: Path, server_url: str | None) -> dict:
    env = dict(os.environ)
    env["CUDAGENT_HOME"] = str(home)
    env["PYTHONWARNINGS"] = "ignore"
    if server_url:
        env["OPENAI_BASE_URL"] = server_url
        env["OPENAI_API_KEY"] = "test-key"
    return env


def cudagent(args: list[str], env: dict, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cudagent", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def summary(stdout: str) -> dict:
    evs = events(stdout)
    assert evs and evs[-1]["event"] == "summary", stdout[-2000:]
    return evs[-1]


def git(repo: str | Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout
