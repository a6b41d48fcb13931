"""Fault injection into whole runs of `cudagent optimize` (CPU): a model server that times out, fails, answers
garbage or overflows the context; tool calls with invalid arguments; a shell command that deletes the workspace;
and kill -9 at random moments followed by --resume. After each, the trajectory and the branch agree turn by turn."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent.episodes import FINISH, KERNEL, MODEL_NEW, SOLVE, cli_env, cudagent, git, summary, write_task
from tests.agent.script_server import ScriptedServer, from_list

CPU = ["--device", "cpu", "--json"]

pytestmark = pytest.mark.slow  # each test runs whole commands, builds or timings


def records(home: Path, run_id: str) -> list[dict]:
    text = (home / "runs" / run_id / "trajectory.jsonl").read_text()
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def assert_consistent(home: Path, s: dict) -> list[dict]:
    """Turns numbered 1..n without gap or repeat, and the branch made of exactly the recorded commits."""
    lines = records(home, s["run_id"])
    turns = [x for x in lines if x["kind"] == "turn"]
    assert [x["turn"] for x in turns] == list(range(1, len(turns) + 1))
    recorded = [x["commit"] for x in turns if x["commit"]]
    recorded += [a["improved"] for x in turns for a in x["actions"] if a.get("improved")]
    on_branch = git(s["repo"], "rev-list", s["branch"]).split()
    assert len(set(recorded)) == len(recorded)
    assert set(recorded) <= set(on_branch) and len(on_branch) == len(recorded) + 1  # + the workspace commit
    return turns


def tool_messages(server) -> list[str]:
    return [m["content"] for m in server.chat_requests[-1]["messages"] if m["role"] == "tool"]


def test_server_and_argument_faults_are_survived(tmp_path):
    task = write_task(tmp_path / "t")
    read, write_kernel, write_model, compile_, verify = SOLVE
    steps = [
        {"times": 1, "sleep": 6, **read, "then": read},  # the first request times out (--request-timeout 2)
        {"times": 2, "status": 500, "then": write_kernel},  # two server errors, then the answer
        {"times": 1, "garbage": "<html>502 Bad Gateway", "then": write_model},  # a body that is not JSON
        {"tool": "compile", "raw_arguments": '{"oops": '},  # arguments that are not JSON
        {"tool": "write_file", "arguments": {"path": 7, "content": None}},  # arguments of the wrong types
        {"tool": "no_such_tool", "arguments": {}},
        compile_,
        verify,
        FINISH,
    ]
    with ScriptedServer(from_list(steps)) as server:
        env = cli_env(tmp_path / "home", server.url)
        proc = cudagent(["optimize", str(task), *CPU, "--no-final-check", "--request-timeout", "2"], env)
        msgs = tool_messages(server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["exit_reason"] == "finished" and s["turns"] == 9
    assert s["best"] is not None and s["best"]["tier"] >= 1
    assert any("not valid JSON" in m or "could not be read" in m for m in msgs), msgs
    assert any("bad arguments for write_file" in m for m in msgs), msgs  # checked against the tool's schema
    assert any("no_such_tool" in m for m in msgs), msgs
    turns = assert_consistent(tmp_path / "home", s)
    assert turns[0]["reply"]["attempts"] == 2 and turns[1]["reply"]["attempts"] == 3


def test_server_down_ends_the_run_with_a_message_and_resume_finishes_it(tmp_path):
    task = write_task(tmp_path / "t")
    home = tmp_path / "home"
    broken = list(SOLVE[:2]) + [{"status": 503}]
    with ScriptedServer(from_list(broken)) as server:
        proc = cudagent(["optimize", str(task), *CPU, "--no-final-check"], cli_env(home, server.url))
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "the model server failed" in proc.stderr and "--resume" in proc.stderr
    s = summary(proc.stdout)
    assert s["exit_reason"] == "policy_error" and s["turns"] == 2
    with ScriptedServer(from_list(list(SOLVE) + [FINISH])) as server:
        again = cudagent(["optimize", "--resume", s["run_id"], "--json"], cli_env(home, server.url))
    assert again.returncode == 0, again.stderr[-2000:]
    s2 = summary(again.stdout)
    assert s2["exit_reason"] == "finished" and s2["turns"] == 6 and s2["best"] is not None
    assert_consistent(home, s2)


def test_context_that_cannot_shrink_ends_the_run_cleanly(tmp_path):
    task = write_task(tmp_path / "t")
    home = tmp_path / "home"
    with ScriptedServer(from_list(list(SOLVE)), context_chars=50) as server:  # no request ever fits
        proc = cudagent(["optimize", str(task), *CPU, "--no-final-check"], cli_env(home, server.url))
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = summary(proc.stdout)
    assert s["exit_reason"] == "context" and "context" in s["error"]
    assert records(home, s["run_id"])[-1]["kind"] == "end"


def test_shell_that_deletes_the_workspace_does_not_break_the_run(tmp_path):
    """Without bubblewrap nothing stops `rm -rf`: the fixed files and the git link come back, the deletion is a
    commit like any other, and the agent rebuilds its kernel from there."""
    task = write_task(tmp_path / "t")
    home = tmp_path / "home"
    steps = list(SOLVE) + [
        {"tool": "bash", "arguments": {"command": "rm -rf ./* ./.git ./.gitignore && ls -A | wc -l"}},
        {"tool": "verify", "arguments": {}},
        {"tool": "write_file", "arguments": {"path": "kernels/axpby_cpu.cpp", "content": KERNEL}},
        {"tool": "write_file", "arguments": {"path": "model_new.py", "content": MODEL_NEW}},
        {"tool": "verify", "arguments": {}},
        FINISH,
    ]
    with ScriptedServer(from_list(steps)) as server:
        args = ["optimize", str(task), *CPU, "--no-final-check", "--sandbox", "limits"]
        proc = cudagent(args, cli_env(home, server.url))
        msgs = tool_messages(server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["exit_reason"] == "finished" and s["turns"] == 11
    assert "restored" in msgs[5]  # model.py and the build infrastructure came back at once
    assert "NO_MODELNEW" in msgs[6] or "no model_new.py" in msgs[6]
    turns = assert_consistent(home, s)
    deletion = next(t for t in turns if t["turn"] == 6)["commit"]
    assert "model_new.py" in git(s["repo"], "show", "--stat", "--format=", deletion)
    assert Path(s["workspace"], "model.py").read_text() == task.read_text()
    assert sum(1 for t in turns for a in t["actions"] if a.get("improved")) >= 1


def test_kill_9_at_random_moments_and_resume_loses_no_turn(tmp_path):
    """A run of 12 turns, each server reply delayed a little, killed with SIGKILL at a random moment after it
    started, again and again; every resume goes on from the last recorded turn. Ends with a resume left alone."""
    rng = random.Random(1234)
    task = write_task(tmp_path / "t")
    home = tmp_path / "home"
    bash = [{"tool": "bash", "arguments": {"command": f"echo step {i} > notes_{i}.txt"}} for i in range(5)]
    steps = [dict(step, sleep=0.4) for step in [*SOLVE, *bash, SOLVE[4], FINISH]]
    kills = 0
    with ScriptedServer(from_list(steps)) as server:
        env = cli_env(home, server.url)
        args = ["optimize", str(task), *CPU, "--no-final-check"]
        for _ in range(6):
            proc = subprocess.Popen(
                [sys.executable, "-m", "cudagent", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
            first = proc.stdout.readline()  # the run exists once its first event is out
            if not first:
                proc.wait()
                break
            time.sleep(rng.uniform(0.2, 4.0))
            if proc.poll() is not None:
                break
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            kills += 1
            args = ["optimize", "--resume", "last", "--json", "--no-final-check"]
        final = cudagent(["optimize", "--resume", "last", "--json", "--no-final-check"], env)
    assert kills >= 3
    assert final.returncode == 0, final.stderr[-3000:]
    s = summary(final.stdout)
    assert s["exit_reason"] == "finished" and s["turns"] == len(steps)
    turns = assert_consistent(home, s)
    assert len(turns) == len(steps)
    assert len([x for x in records(home, s["run_id"]) if x["kind"] == "resume"]) >= kills
    assert s["best"] is not None
