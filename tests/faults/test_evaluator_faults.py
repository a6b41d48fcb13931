"""Fault injection into the evaluator (CPU): a candidate that crashes, hangs, eats memory or floods its output, and
builds that hang or flood. Each fault is reported with its own code and a clear message, and the same Evaluator
then accepts a good candidate: a fault costs one evaluation, never the evaluator."""

from __future__ import annotations

import resource
import subprocess

import pytest

from cudagent.workspace import Workspace
from tests.faults import faults

LIMIT = 1 << 30  # the candidate's host memory limit in these tests

pytestmark = pytest.mark.slow  # each test runs whole commands, builds or timings


@pytest.fixture(scope="module")
def evaluator():
    with faults.evaluator("cpu", call_timeout_s=10, build_timeout_s=300, memory_limit_bytes=LIMIT) as ev:
        yield ev


@pytest.fixture(scope="module")
def good(evaluator, tmp_path_factory):
    ws = Workspace.create(tmp_path_factory.mktemp("good") / "ws", evaluator.task.source)
    faults.good_cpu(ws)
    return ws


def workspace(tmp_path, evaluator) -> Workspace:
    return Workspace.create(tmp_path / "ws", evaluator.task.source)


def assert_still_serves(evaluator, good):
    verdict = evaluator.evaluate(good)
    assert verdict.correct, verdict.summary()


@pytest.mark.parametrize(
    "fault, code, words",
    [
        ("segfault", "CRASHED", "SIGSEGV"),
        ("spin", "TIMEOUT", "did not finish within 10 s"),
        ("host_oom", "OUT_OF_MEMORY", "more than 1.0 GiB of host memory"),
    ],
)
def test_candidate_fault_is_reported_and_the_evaluator_goes_on(evaluator, good, tmp_path, fault, code, words):
    ws = workspace(tmp_path, evaluator)
    faults.faulty_cpu(ws, fault)
    verdict = evaluator.evaluate(ws)
    assert not verdict.correct and code in verdict.codes, verdict.summary()
    assert words in verdict.error, verdict.error
    assert_still_serves(evaluator, good)


def test_output_flood_costs_no_memory(evaluator, good, tmp_path):
    """30 MB printed per call, about 300 MB over the evaluation: kept as a bounded head and tail."""
    ws = workspace(tmp_path, evaluator)
    faults.faulty_cpu(ws, "print_flood")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    verdict = evaluator.evaluate(ws)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert verdict.correct, verdict.summary()  # printing is not a fault of the result
    assert grown_mb < 100, f"the evaluator's own memory grew by {grown_mb:.0f} MB"
    assert_still_serves(evaluator, good)


def test_hanging_compile_is_stopped_with_its_processes(good, tmp_path):
    with faults.evaluator("cpu", build_timeout_s=5) as ev:
        ws = workspace(tmp_path, ev)
        faults.compile_hang(ws)
        verdict = ev.evaluate(ws)
    assert "BUILD_TIMEOUT" in verdict.codes, verdict.summary()
    assert "ran past its 5 s limit" in verdict.error
    left = subprocess.run(["pgrep", "-f", str(ws.kernels_dir / "hang.cpp")], capture_output=True, text=True)
    assert left.stdout.strip() == "", "a compiler process outlived the build's timeout"


def test_flood_of_compiler_errors_is_trimmed(evaluator, good, tmp_path):
    ws = workspace(tmp_path, evaluator)
    faults.compile_error_flood(ws)
    verdict = evaluator.evaluate(ws)
    assert "BUILD_FAILED" in verdict.codes, verdict.summary()
    assert "static assertion failed" in verdict.error and "flood.cpp" in verdict.error
    assert len(verdict.error) < 20_000, f"{len(verdict.error)} characters of errors reach the agent"
    assert_still_serves(evaluator, good)
