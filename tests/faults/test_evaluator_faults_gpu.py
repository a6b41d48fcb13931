"""Fault injection into the evaluator on the GPU: an illegal memory access, a kernel that never ends, allocation
until the GPU is out of memory, a host segfault in the launcher. Each is reported with its code and the same
Evaluator then accepts the good kernel: the GPU serves the next call."""

from __future__ import annotations

import pytest

from cudagent.workspace import Workspace
from tests.faults import faults


@pytest.fixture(scope="module")
def evaluator():
    with faults.evaluator("cuda", call_timeout_s=20, build_timeout_s=300) as ev:
        yield ev


@pytest.fixture(scope="module")
def good(evaluator, tmp_path_factory):
    ws = Workspace.create(tmp_path_factory.mktemp("good") / "ws", evaluator.task.source)
    faults.good_cuda(ws)
    verdict = evaluator.evaluate(ws)
    assert verdict.correct, verdict.summary()
    return ws


@pytest.mark.parametrize(
    "fault, codes",
    [
        ("illegal_address", {"CUDA_ERROR", "CRASHED"}),
        ("gpu_spin", {"TIMEOUT"}),
        # it fills the GPU, and its process holds the memory until it is closed: alone, with the timed tests
        pytest.param("gpu_oom", {"CUDA_ERROR", "FORWARD_RAISED"}, marks=pytest.mark.serial),
        ("segfault", {"CRASHED"}),
    ],
)
def test_gpu_fault_is_reported_and_the_gpu_serves_the_next_call(evaluator, good, tmp_path, fault, codes):
    ws = Workspace.create(tmp_path / "ws", evaluator.task.source)
    faults.faulty_cuda(ws, fault)
    verdict = evaluator.evaluate(ws)
    print(f"\n[{fault}] {verdict.summary()}\n  error: {(verdict.error or '')[:400]}")
    assert not verdict.correct and codes & set(verdict.codes), verdict.summary()
    after = evaluator.evaluate(good)
    print(f"[{fault}] next call on the good kernel: correct={after.correct} ({after.seconds.get('total')} s)")
    assert after.correct, after.summary()
