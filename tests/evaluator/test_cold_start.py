"""An evaluation's cold start overlapped (evaluator/overlap.py): the build and the link audit's calibration run beside
the task check (and, on a CUDA host with cores to spare, beside the baselines) instead of after them; a CPU device's
baselines are still measured with nothing compiling; an import of the candidate's model_new.py (a load_inline call
that only running it tells) waits for every clean measurement to end. Each test reads the verdict's timeline."""

from __future__ import annotations

import shutil
import threading

import pytest

from cudagent.evaluator.overlap import RESERVED_CORES, Beside, Timeline, room_beside_measurement
from tests.agent.episodes import axpby_workspace
from tests.caches import seeded_cache


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_where_a_compile_may_run_while_a_clean_measurement_is_left():
    cores = set(range(16))
    assert room_beside_measurement(True, measuring=False, cores=cores) == cores
    assert room_beside_measurement(True, measuring=True, cores=cores) == set(range(RESERVED_CORES, 16))
    assert room_beside_measurement(False, measuring=True, cores=cores) is None  # a CPU device's baselines: CPU time
    assert room_beside_measurement(True, measuring=True, cores={0, 1, 2, 3}) is None  # no cores to spare
    assert room_beside_measurement(False, measuring=False, cores={0, 1}) == {0, 1}


def test_a_job_beside_a_measurement_runs_pinned_and_one_without_room_waits_for_quiet():
    import os

    timeline, quiet = Timeline(), threading.Event()
    mine = set(os.sched_getaffinity(0))
    pinned = Beside("pinned", lambda: os.sched_getaffinity(0), timeline, {min(mine)}, quiet)
    waiting = Beside("waiting", lambda: timeline.now(), timeline, None, quiet)
    assert pinned.result() == {min(mine)}
    assert set(os.sched_getaffinity(0)) == mine  # the caller's thread kept its cores
    assert not waiting.done()
    set_at = timeline.now()
    quiet.set()
    assert waiting.result() >= set_at


@pytest.mark.slow  # a whole evaluation (about 15 s on two cores)
def test_the_build_runs_beside_the_task_check(tmp_path, monkeypatch):
    """Nothing to measure (timing off): the build starts with the task check, not after it."""
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator

    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))  # no task checked on it yet
    task, ws = axpby_workspace(tmp_path)
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=False)) as evaluator:
        v = evaluator.evaluate(ws)
    assert v.correct, v.summary()
    spans = v.timeline
    assert {"task_check", "build", "verify"} <= set(spans), spans
    assert _overlap(spans["build"], spans["task_check"]), spans
    assert spans["verify"][0] >= max(spans["build"][1], spans["task_check"][1]), spans


@pytest.mark.slow  # the link audit's calibration compiles an extension from nothing (tens of seconds)
def test_the_link_audits_calibration_is_made_beside_the_first_evaluation(tmp_path, monkeypatch):
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator

    cache = seeded_cache(tmp_path / "cache")
    import shutil

    shutil.rmtree(cache / "link-baseline", ignore_errors=True)
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(cache))
    task, ws = axpby_workspace(tmp_path)
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=False)) as evaluator:
        v = evaluator.evaluate(ws)
        assert v.correct, v.summary()
        spans = v.timeline
        assert _overlap(spans["link_calibration"], spans["build"]), spans
        assert _overlap(spans["link_calibration"], spans["task_check"]), spans
        again = evaluator.evaluate(ws)
    assert "link_calibration" not in again.timeline  # once per machine, kept
    assert any((cache / "link-baseline").iterdir())


@pytest.mark.slow  # measures a CPU baseline, torch.compile included
def test_a_cpu_devices_baselines_are_measured_with_nothing_compiling(tmp_path, monkeypatch):
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.evaluator.timing.measure import Plan

    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))
    task, ws = axpby_workspace(tmp_path)
    plan = Plan(min_samples=5, min_seconds=0.05, max_seconds=1.0, warmup_calls=2)
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=True, plan=plan)) as evaluator:
        v = evaluator.evaluate(ws)
    spans = v.timeline
    assert "baselines" in spans, (spans, v.summary())
    assert spans["build"][0] >= spans["baselines"][1], spans
    assert spans["baselines"][0] >= spans["task_check"][1], spans  # task code runs here only once it is checked


@pytest.mark.slow  # builds a load_inline extension
def test_importing_model_new_to_find_its_load_inline_calls_waits_for_quiet(tmp_path, monkeypatch):
    """A build whose load_inline calls only running model_new.py tells does not run it until `quiet` is set: no
    candidate code runs beside a clean measurement."""
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for
    from tests.agent.episodes import REPO

    source = (REPO / "tests" / "adversarial" / "cases" / "control_inline_cpu" / "model_new.py").read_text()
    source = source.replace('name="vadd_inline_cpu"', 'name="vadd_inline_" + str(len("quiet"))')  # read by running
    (tmp_path / "model_new.py").write_text(source)
    task = load_task(REPO / "tests" / "adversarial" / "tasks" / "vadd.py")
    ws = workspace_for(resolve_candidate(tmp_path / "model_new.py"), task.source)
    order = []

    class Quiet(threading.Event):
        def wait(self, timeout=None):
            order.append("waits")
            return super().wait(timeout)

    quiet = Quiet()
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=False)) as evaluator:
        wanted = evaluator._wanted_calls
        monkeypatch.setattr(evaluator, "_wanted_calls", lambda h: (order.append("imports"), wanted(h))[1])
        handin = evaluator.cell().handin()
        handin.put("model_new.py", source)
        try:
            job = Beside("build", lambda: evaluator.build(ws, handin, quiet), Timeline(), {0}, quiet)  # runs now
            for _ in range(600):  # until the build reaches the import (polled, at most a minute)
                if order or job.done():
                    break
                threading.Event().wait(0.1)
            assert order == ["waits"], order
            order.append("quiet")
            quiet.set()
            built = job.result()
        finally:
            handin.remove()
    assert built.ok, built.errors
    assert order[:3] == ["waits", "quiet", "imports"], order


@pytest.mark.slow  # builds a unit (the session's `doctor --prepare` made the headers it reads)
def test_doctor_prepare_makes_the_machines_facts_once(prepared_machine, tmp_path, monkeypatch):
    """The session's cache was prepared by `cudagent doctor --prepare` before any test built (conftest.py): it made
    the link audit's calibration and the precompiled headers of both headers a workspace's kernels start with (and of
    the one a KernelBench candidate's load_inline call starts with) at once, not at a build's second miss, without
    compiling a unit of its own, and a kernel's first unit and a load_inline call's then compile with them."""
    import json

    from tests.caches import session_cache

    assert prepared_machine is not None, "conftest.py prepares the session's cache when this test is selected"
    assert prepared_machine["returncode"] == 0, prepared_machine["stdout"] + prepared_machine["stderr"]
    checks = {c["name"]: c for c in json.loads(prepared_machine["stdout"])["checks"]}
    assert checks["link-audit calibration"]["ok"], checks
    assert any((session_cache() / "link-baseline").iterdir())
    assert checks["precompiled headers"]["ok"], checks
    assert prepared_machine["pch_before"] == [], prepared_machine  # the session's first build had not run
    # both workspace headers, and torch/extension.h once more with the flags a plain load_inline call compiles with
    assert prepared_machine["pch_after"] == ["torch/extension.h", "torch/extension.h", "torch/types.h"]

    # a kernel's unit that starts with torch/types.h compiles with doctor's PCH: no new entry, no miss counted (in a
    # cache of the test's own, seeded with the session's: its counts are this build's alone)
    from cudagent.device.info import resolve_device
    from cudagent.evaluator.toolchain.extension import build_workspace
    from cudagent.workspace import resolve_candidate, workspace_for
    from tests.agent.episodes import REPO, write_task

    cache = seeded_cache(tmp_path / "cache", facts=("objects", "manifests", "link-baseline"))
    shutil.copytree(session_cache() / "pch", cache / "pch")  # copies, not links: the misses it counts are its own
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(cache))
    entries = sorted(p.name for p in (cache / "pch").iterdir())
    misses = {m: m.read_text() for m in (cache / "pch").glob("*/misses")}
    task = write_task(tmp_path / "task")
    ws = workspace_for(resolve_candidate(REPO / "examples" / "solutions" / "cpu" / "axpby"), task.read_text())
    unit = next(ws.kernels_dir.glob("*.cpp"))
    unit.write_text(unit.read_text() + "\nint doctor_pch_probe() { return 7; }\n")  # new to the object cache
    assert build_workspace(ws, resolve_device("cpu")).ok
    # and a plain load_inline call's main.cpp, new to the object cache, with doctor's torch/extension.h
    from cudagent.evaluator.toolchain import inline

    source = "torch::Tensor doctor_pch_probe(torch::Tensor x) { return x; }"
    spec = inline.InlineSpec.of_call(("doctor_pch_probe", source), {"functions": ["doctor_pch_probe"]})
    assert inline.build(spec, resolve_device("cpu"), timeout_s=600).ok
    assert sorted(p.name for p in (cache / "pch").iterdir()) == entries
    assert {m: m.read_text() for m in (cache / "pch").glob("*/misses")} == misses


@pytest.mark.slow  # waits out the task's deadline
def test_a_task_that_hangs_its_check_ends_the_evaluation_and_the_baselines_beside_it(tmp_path):
    """The check keeps the task's deadline (an alarm: the main thread's) and comes before the baselines, whose
    preparation runs the task's forward in this process too (its sizes, on the meta device), where nothing could
    stop it: a first version that prepared them beside the check hung here."""
    import os
    import subprocess
    import sys
    import time

    from tests.agent.episodes import REPO, TASK

    path = tmp_path / "hangs.py"
    path.write_text(TASK.replace("return self.alpha * a + b", "import time; time.sleep(10_000)"))
    script = f"""
from cudagent.device.info import resolve_device
from cudagent.errors import TaskError
from cudagent.evaluator import EvalOptions, Evaluator
from cudagent.task import load_task
from cudagent.workspace import resolve_candidate, workspace_for
from pathlib import Path
task = load_task(Path({str(path)!r}))
ws = workspace_for(resolve_candidate(Path({str(REPO / "examples" / "solutions" / "cpu" / "axpby")!r})), task.source)
with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=True)) as evaluator:
    try:
        evaluator.evaluate(ws)
    except TaskError as exc:
        print("TaskError:", exc)
"""
    env = {**os.environ, "CUDAGENT_CACHE_DIR": str(seeded_cache(tmp_path / "cache")), "CUDAGENT_TASK_TIMEOUT_S": "4"}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
    assert "TaskError:" in done.stdout and "did not load and run within 4 s" in done.stdout, done.stdout + done.stderr
    assert time.monotonic() - start < 120
