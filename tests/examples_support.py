"""Shared by the example tests: where the examples live and how one solution is judged."""

from __future__ import annotations

from pathlib import Path

from cudagent.device.info import resolve_device
from cudagent.evaluator import EvalOptions, Evaluator, Verdict
from cudagent.task import load_task
from cudagent.workspace import resolve_candidate, workspace_for

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TASKS = EXAMPLES / "tasks"
SOLUTIONS = EXAMPLES / "solutions"


def solutions(device: str) -> list[Path]:
    return sorted(p for p in (SOLUTIONS / device).iterdir() if p.is_dir())


def judge(solution: Path, device: str, timing: bool = False) -> Verdict:
    task = load_task(TASKS / f"{solution.name}.py")
    evaluator = Evaluator(task, resolve_device(device), EvalOptions(timing=timing))
    return evaluator.evaluate(workspace_for(resolve_candidate(solution), task.source))
