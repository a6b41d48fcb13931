"""`cudagent doctor` against real servers and this machine's tools."""

from __future__ import annotations

import json

import pytest

from tests.agent.episodes import cli_env, cudagent
from tests.agent.script_server import ScriptedServer


def _checks(proc) -> dict:
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def test_doctor_reports_tools_and_a_server_with_tool_calls(tmp_path):
    with ScriptedServer(lambda i, m: {"text": "hi"}) as server:
        proc = cudagent(["doctor", "--device", "cpu", "--json"], cli_env(tmp_path, server.url))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = _checks(proc)
    assert checks["model server"]["ok"] and "scripted-model" in checks["model server"]["detail"]
    assert checks["tool calls"]["ok"] and checks["ninja"]["ok"] and checks["C++ compiler"]["ok"]


def test_doctor_says_when_the_server_has_no_tool_calls(tmp_path):
    with ScriptedServer(lambda i, m: {"text": "hi"}, tool_choice=()) as server:
        proc = cudagent(["doctor", "--device", "cpu", "--json"], cli_env(tmp_path, server.url))
    assert proc.returncode == 0
    assert not _checks(proc)["tool calls"]["ok"] and "text action format" in _checks(proc)["tool calls"]["detail"]


def test_doctor_fails_on_an_unreachable_server(tmp_path):
    proc = cudagent(["doctor", "--device", "cpu", "--json"], cli_env(tmp_path, "http://127.0.0.1:9/v1"))
    assert proc.returncode == 3
    assert not _checks(proc)["model server"]["ok"]


def test_optimize_with_an_unreachable_server_creates_no_run(tmp_path):
    from tests.agent.episodes import write_task

    task = write_task(tmp_path / "t")
    proc = cudagent(["optimize", str(task), "--device", "cpu"], cli_env(tmp_path / "home", "http://127.0.0.1:9/v1"))
    assert proc.returncode == 3 and "model server cannot be used" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "home" / "runs").exists()


@pytest.mark.slow
def test_optimize_usage_errors(tmp_path):
    env = cli_env(tmp_path / "home", "http://127.0.0.1:9/v1")
    neither = cudagent(["optimize"], env)
    assert neither.returncode == 2 and "--resume" in neither.stderr
    missing = cudagent(["optimize", str(tmp_path / "nope.py")], env)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    no_run = cudagent(["optimize", "--resume", "last"], env)
    assert no_run.returncode == 2 and "no runs" in no_run.stderr
