"""Inputs that are not tensors (a Python number, None, a string, a tuple of them), as KernelBench passes them: given
to both models as they are, every trial and every timed call; anything else is refused in one sentence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cudagent.errors import TaskError
from cudagent.task import load_task

ROOT = Path(__file__).resolve().parents[2]
TASK = '''"""alpha * a + b, with alpha and a mode passed at call time."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b, alpha, mode):
        assert mode == ("fma", None, 2), mode  # the tuple arrives as it was made
        return alpha * a + b


def get_inputs():
    return [torch.randn(4096), torch.randn(4096), 0.5, ("fma", None, 2)]


def get_init_inputs():
    return []
'''
MODEL_NEW = """import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def forward(self, a, b, alpha, mode):
        assert mode == ("fma", None, 2), mode
        return cuda_extension.axpby_forward(a, b, alpha)
"""


def test_plain_values_are_inputs_and_other_objects_are_refused(tmp_path):
    path = tmp_path / "scaled.py"
    path.write_text(TASK)
    inputs = load_task(path).make_inputs(0, "cpu")
    assert inputs[2:] == [0.5, ("fma", None, 2)] and all(type(x) is torch.Tensor for x in inputs[:2])
    path.write_text(TASK.replace('("fma", None, 2)]', '("fma", None, 2), object()]'))
    with pytest.raises(TaskError, match=r"item 4 is a builtins.object; inputs must be tensors, Python numbers"):
        load_task(path).make_inputs(0, "cpu")
    path.write_text(TASK.replace("0.5,", "torch.nn.Parameter(torch.ones(1)),"))  # a tensor subclass
    with pytest.raises(TaskError, match="item 2 is a torch.nn.parameter.Parameter"):
        load_task(path).make_inputs(0, "cpu")


@pytest.mark.slow
def test_a_task_with_a_scalar_input_is_verified_and_timed(tmp_path):
    task = tmp_path / "scaled.py"
    task.write_text(TASK)
    candidate = tmp_path / "candidate"
    (candidate / "kernels").mkdir(parents=True)
    (candidate / "model_new.py").write_text(MODEL_NEW)
    kernel = ROOT / "examples" / "solutions" / "cpu" / "axpby" / "kernels" / "axpby_cpu.cpp"
    (candidate / "kernels" / "axpby_cpu.cpp").write_text(kernel.read_text())
    argv = [sys.executable, "-m", "cudagent", "check", str(task), str(candidate), "--device", "cpu", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    verdict = json.loads(proc.stdout)
    assert verdict["correct"] and verdict["tier"] >= 1 and verdict["time_ms"]["candidate"] > 0
    assert len(verdict["trials"]) >= 8 and all(t["passed"] for t in verdict["trials"])
