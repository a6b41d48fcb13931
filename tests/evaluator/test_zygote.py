"""The fork server: children forked from a zygote behave like children started anew (their own environment,
session, output and exit status), and the evaluator survives a zygote that dies."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from cudagent.evaluator.jail.process import ChildFailure, ChildProcess, child_env
from cudagent.evaluator.jail.zygote import Zygote
from tests.agent.episodes import axpby_workspace

PROBE = """import os, sys
print("home=" + os.environ["HOME"], "sid=" + str(os.getsid(0) == os.getpid()), "tmp=" + os.environ.get("MARK", ""))
sys.stdout.flush()
"""


@pytest.fixture
def zygote():
    home = tempfile.mkdtemp(prefix="test-zygote-")
    z = Zygote(child_env(home, {"MARK": "zygote"}), home)
    yield z
    z.close()


def _import(child: ChildProcess, path: Path) -> dict:
    """Import `path` as the candidate's process imports a hand-in's model_new.py."""
    handin = path.parent / f"handin-{path.stem}"
    handin.mkdir(exist_ok=True)
    shutil.copyfile(path, handin / "model_new.py")
    return child.request(
        {"op": "load", "handin": str(handin), "device": "cpu", "import_only": True}, timeout_s=120, what="importing"
    )


def test_a_forked_child_has_its_own_environment_session_and_output(zygote, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    with ChildProcess(zygote=zygote, extra_env={"MARK": "child"}) as child:
        assert child.proc.__class__.__name__ == "ForkedProcess"
        assert _import(child, probe)["ok"]
        pid, home = child.proc.pid, child.home
    assert child.proc.returncode == 0
    out = child.output.text()
    assert f"home={home}" in out and "sid=True" in out and "tmp=child" in out, out
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_forked_child_that_dies_of_a_signal_says_which(zygote, tmp_path):
    crash = tmp_path / "crash.py"
    crash.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    with ChildProcess(zygote=zygote) as child:
        with pytest.raises(ChildFailure) as failure:
            _import(child, crash)
    assert failure.value.code == "CRASHED" and "SIGSEGV" in failure.value.message
    assert child.proc.returncode == -signal.SIGSEGV


def test_a_dead_zygote_means_a_fresh_interpreter(zygote, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    os.kill(zygote.proc.pid, signal.SIGKILL)
    zygote.proc.wait()
    with ChildProcess(zygote=zygote) as child:
        assert child.proc.__class__.__name__ == "Popen"
        assert _import(child, probe)["ok"]


@pytest.mark.slow
def test_the_evaluator_restarts_a_dead_zygote(tmp_path):
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for
    from tests.agent.episodes import REPO, write_task

    task = load_task(write_task(tmp_path / "task"))  # axpby on small vectors: these tests time nothing
    ws = workspace_for(resolve_candidate(REPO / "examples" / "solutions" / "cpu" / "axpby"), task.source)
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=False, fork_server=True)) as evaluator:
        assert evaluator.evaluate(ws).correct
        first = evaluator._zygote
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait()
        assert evaluator.evaluate(ws).correct
        assert evaluator._zygote is not first and evaluator._zygote.alive()
    assert evaluator._zygote is None


@pytest.mark.slow
def test_the_next_evaluation_runs_in_the_spare_process(tmp_path):
    """After an evaluation the evaluator keeps two processes started for the next ones (they set CUDA and the
    profiler up while the agent works) and uses the older first; a process that was sent nothing because the build
    failed is kept, first in line."""
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for
    from tests.agent.episodes import REPO, write_task

    task = load_task(write_task(tmp_path / "task"))  # axpby on small vectors: these tests time nothing
    shutil.copytree(REPO / "examples" / "solutions" / "cpu" / "axpby", tmp_path / "axpby")
    ws = workspace_for(resolve_candidate(tmp_path / "axpby"), task.source)
    kernel = next(p for p in sorted(ws.kernels_dir.iterdir()) if p.suffix == ".cpp")
    good = kernel.read_text()
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=False, spare_process=True)) as evaluator:
        kernel.write_text(good + "\nthis does not compile;\n")
        assert [v.code for v in evaluator.evaluate(ws).violations] == ["BUILD_FAILED"]
        (kept,) = evaluator._spares
        assert kept.alive()  # never sent anything: it serves the next evaluation
        kernel.write_text(good)
        assert evaluator.evaluate(ws).correct
        assert not kept.alive()  # it ran that evaluation and was closed with it
        older, newer = evaluator._spares  # topped up to two, started after the evaluation
        assert older is not kept and older.alive() and newer.alive()
        assert evaluator.evaluate(ws).correct
        assert not older.alive() and newer.alive()  # the older, readier one ran it
        assert list(evaluator._spares)[0] is newer and len(evaluator._spares) == 2
    assert not evaluator._spares and not newer.alive()


@pytest.mark.slow  # more than a few seconds (the inner loop leaves it out)
def test_with_nothing_to_measure_alone_the_candidates_process_starts_before_the_task_check(tmp_path, monkeypatch):
    """The fork server's import and the candidate process's start overlap the task check and the build; the
    evaluation then runs in that very process."""
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator

    task, ws = axpby_workspace(tmp_path)
    seen = []
    validate = Evaluator.validate
    monkeypatch.setattr(Evaluator, "validate", lambda self: (seen.append(self._starting), validate(self)))
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=False)) as evaluator:
        assert evaluator.evaluate(ws).correct
        (starting,) = seen
        assert starting is not None and evaluator._starting is None
        assert not starting.get().alive()  # it ran the evaluation and was closed with it


def test_with_baselines_to_measure_nothing_starts_before_them(tmp_path, monkeypatch):
    """Clean baselines are measured with no candidate process and no fork server on the machine."""
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator

    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(tmp_path / "empty-cache"))
    task, ws = axpby_workspace(tmp_path)
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=True)) as evaluator:
        evaluator._start_early(timing=True)
        assert evaluator._starting is None and evaluator._zygote is None
        assert evaluator.baselines._warming is None
