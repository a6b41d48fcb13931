"""Confinement on the GPU: the CUDA driver, CUPTI and load_inline's nvcc work in a confined candidate process, and
what they needed beyond the grants shows here first (cudagent/evaluator/jail/confine.py). The escape probe itself is
CPU code (test_confinement.py); on the device it runs as the CPU case does, beside CUDA."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cudagent.device.info import resolve_device
from cudagent.evaluator import EvalOptions, Evaluator
from cudagent.task import load_task
from cudagent.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]
INLINE = Path(__file__).parent / "cases" / "control_inline_cuda" / "model_new.py"


def _workspace(tmp_path: Path, name: str) -> tuple:
    task = load_task(ROOT / "examples" / "tasks" / f"{name}.py")
    ws = Workspace.create(tmp_path / name, task.source)
    solution = ROOT / "examples" / "solutions" / "cuda" / name
    shutil.copytree(solution / "kernels", ws.kernels_dir, dirs_exist_ok=True)
    shutil.copy2(solution / "model_new.py", ws.model_new_py)
    return task, ws


@pytest.mark.parametrize("level", ["strict", "off"])
def test_a_cuda_candidate_is_correct_and_confined_under_strict(tmp_path, level):
    task, ws = _workspace(tmp_path, "softmax")
    options = EvalOptions(confine=level, timing=True, ncu=True)
    with Evaluator(task, resolve_device("cuda"), options) as ev:
        v = ev.evaluate(ws)
    print(level, v.summary(detail=True), v.seconds, v.confinement)
    assert v.correct, v.summary()
    assert bool(v.confinement["confined"]) == (level == "strict"), v.confinement
    if level == "strict":  # Nsight Compute needs an unconfined process with its privileges
        assert any("skipped under --confine strict" in n for n in v.notes), v.notes


def test_a_load_inline_cuda_candidate_builds_and_runs_confined(tmp_path):
    task = load_task(Path(__file__).parent / "tasks" / "vadd.py")
    ws = Workspace.create(tmp_path / "inline", task.source)
    shutil.copy2(INLINE, ws.model_new_py)
    with Evaluator(task, resolve_device("cuda"), EvalOptions(confine="strict", timing=False)) as ev:
        v = ev.evaluate(ws)
    print(v.summary(), v.seconds, v.confinement)
    assert v.correct and v.confinement["confined"], v.summary()
