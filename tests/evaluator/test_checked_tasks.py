"""A task's check (it runs and is deterministic; which null candidates pass it) is made once per machine and kept in
the trusted cache (evaluator/checked_tasks.py): a later evaluator of the same task reads it and runs none of the
task's code for it; a task that failed, another tolerance, or a client's task (host_task) is checked again."""

from __future__ import annotations

import pytest

from cudagent.device.info import resolve_device
from cudagent.errors import TaskError
from cudagent.evaluator import EvalOptions, Evaluator
from cudagent.evaluator import evaluator as evaluator_module
from cudagent.evaluator.compare import Tolerance
from cudagent.evaluator.verdict import Verdict
from cudagent.task import load_task

# A task the null candidate "zeros" passes: its output is all zeros (flagged DEGENERATE_TASK)
ZEROS = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 0
def get_inputs():
    return [torch.randn(64, 64)]
def get_init_inputs():
    return []
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def calls(monkeypatch):
    """Every run of the task's check and of its null candidates, counted."""
    seen = {"validate": 0, "nulls": 0}
    validate, nulls = evaluator_module.Task.validate, evaluator_module.null_candidates

    def counted_validate(task, *args, **kwargs):
        seen["validate"] += 1
        return validate(task, *args, **kwargs)

    def counted_nulls(*args, **kwargs):
        seen["nulls"] += 1
        return nulls(*args, **kwargs)

    monkeypatch.setattr(evaluator_module.Task, "validate", counted_validate)
    monkeypatch.setattr(evaluator_module, "null_candidates", counted_nulls)
    return seen


def _check(task, options=None) -> Verdict:
    v = Verdict()
    with Evaluator(task, resolve_device("cpu"), options or EvalOptions(timing=False)) as evaluator:
        evaluator._check_task(v)
    return v


def test_a_checked_task_is_not_run_again_by_the_next_evaluator(tmp_path, cache, calls):
    (tmp_path / "zeros.py").write_text(ZEROS)
    task = load_task(tmp_path / "zeros.py")
    first = _check(task)
    assert calls == {"validate": 1, "nulls": 1}
    assert first.null_candidates and any("DEGENERATE_TASK" in f for f in first.flags)
    again = _check(load_task(tmp_path / "zeros.py"))
    assert calls == {"validate": 1, "nulls": 1}  # read from the cache: the task's code did not run
    assert again.null_candidates == first.null_candidates and again.flags == first.flags
    assert list((cache / "checked-tasks").iterdir())


def test_another_tolerance_a_changed_task_or_a_clients_task_is_checked_again(tmp_path, cache, calls):
    (tmp_path / "zeros.py").write_text(ZEROS)
    _check(load_task(tmp_path / "zeros.py"))
    _check(load_task(tmp_path / "zeros.py"), EvalOptions(timing=False, tolerance=Tolerance(atol=0.5, rtol=0.5)))
    assert calls == {"validate": 2, "nulls": 2}
    (tmp_path / "zeros.py").write_text(ZEROS.replace("x * 0", "x * 0.0"))
    _check(load_task(tmp_path / "zeros.py"))
    assert calls == {"validate": 3, "nulls": 3}
    evaluator = Evaluator(load_task(tmp_path / "zeros.py"), resolve_device("cpu"), EvalOptions(host_task=True))
    try:
        assert evaluator._recalled_check() is None  # a client's code is not trusted to behave the same twice
    finally:
        evaluator.close()


def test_a_task_that_failed_its_check_is_not_kept(tmp_path, cache, calls):
    (tmp_path / "broken.py").write_text(ZEROS.replace("return x * 0", "raise RuntimeError('no')"))
    for _ in range(2):
        with pytest.raises(TaskError):
            _check(load_task(tmp_path / "broken.py"))
    assert calls["validate"] == 2 and calls["nulls"] == 0
    assert not (cache / "checked-tasks").exists()
