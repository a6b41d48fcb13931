"""Whole episodes of `cudagent optimize` on the CPU: a real HTTP model server with scripted tool calls, real git,
the real evaluator building C++ kernels."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent.episodes import (
    FINISH,
    KERNEL,
    MODEL_NEW,
    SOLVE,
    WRONG_MODEL_NEW,
    cli_env,
    cudagent,
    events,
    git,
    summary,
    write_task,
)
from tests.agent.script_server import ScriptedServer, from_list

CPU = ["--device", "cpu", "--json"]

pytestmark = pytest.mark.slow  # each test runs whole commands, builds or timings


def test_solving_episode_commits_every_turn_and_tags_the_best(tmp_path):
    task = write_task(tmp_path / "plain")  # not in a git repo: the run gets a repository of its own
    with ScriptedServer(from_list(SOLVE + [FINISH])) as server:
        proc = cudagent(["optimize", str(task), *CPU, "--no-final-check"], cli_env(tmp_path / "home", server.url))
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["exit_reason"] == "finished" and s["turns"] == 6
    assert s["best"]["tier"] == 1 and s["best"]["commit"]
    repo = s["repo"]
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == s["branch"]
    subjects = git(repo, "log", "--format=%s", s["branch"]).splitlines()[::-1]
    assert subjects[0].startswith("cudagent: workspace for")
    # turns 2 and 3 wrote files: one commit each; turn 5 verified: a commit for the new best
    assert subjects[1:] == ["turn 2: write_file", "turn 3: write_file", "turn 5: new best, tier 1"]
    best_msg = git(repo, "log", "-1", "--format=%B", s["best"]["commit"])
    for trailer in (
        "Cudagent-Turn: 5",
        "Cudagent-Tier: 1",
        f"Cudagent-Run: {s['run_id']}",
        "Cudagent-Model: scripted-model",
        "Cudagent-GPU: CPU",
    ):
        assert trailer in best_msg, best_msg
    assert git(repo, "rev-parse", f"{s['branch']}/best").strip() == s["best"]["commit"]
    assert git(repo, "show", f"{s['best']['commit']}:model_new.py") == MODEL_NEW
    # each turn's diff is reviewable: turn 2 added exactly the kernel
    turn2 = git(repo, "log", "--format=%H", "--grep", "^turn 2:", s["branch"]).split()[0]
    assert git(repo, "show", "--name-only", "--format=", turn2).split() == ["kernels/axpby_cpu.cpp"]
    assert git(repo, "status", "--porcelain").strip() == ""  # build outputs are ignored
    # the trajectory: header, 6 turns, an end, all messages
    lines = [
        json.loads(x) for x in (tmp_path / "home" / "runs" / s["run_id"] / "trajectory.jsonl").read_text().splitlines()
    ]
    assert [x["kind"] for x in lines] == ["run"] + ["turn"] * 6 + ["end"]
    assert lines[5]["actions"][0]["verdict"]["correct"] is True
    # the model saw tool results as tool messages answering its calls
    last = server.chat_requests[-1]["messages"]
    assert last[-1]["role"] == "tool" and last[-1]["tool_call_id"] == "call_4_0"
    assert "CORRECT (tier 1: correct; not timed)" in last[-1]["content"]
    compiled = next(m for m in last if m["role"] == "tool" and m["tool_call_id"] == "call_3_0")
    assert "\nbuild OK (" in compiled["content"], compiled  # the compile tool built, not merely verify after it


def test_worktree_leaves_the_users_branch_and_dirty_files_alone(tmp_path):
    user = tmp_path / "project"
    user.mkdir()
    git(user, "init", "-q", "-b", "main")
    task = write_task(user / "models")
    (user / "notes.txt").write_text("committed\n")
    git(user, "add", "-A")
    git(user, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "user work")
    (user / "notes.txt").write_text("uncommitted edit\n")  # dirty work the run must never touch
    (user / "scratch.py").write_text("untracked\n")
    head_before = git(user, "rev-parse", "HEAD").strip()
    with ScriptedServer(from_list(SOLVE[1:3])) as server:
        proc = cudagent(["optimize", str(task), *CPU, "--no-final-check"], cli_env(tmp_path / "home", server.url))
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["exit_reason"] == "finished" and s["best"] is None
    assert git(user, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(user, "rev-parse", "HEAD").strip() == head_before
    assert (user / "notes.txt").read_text() == "uncommitted edit\n" and (user / "scratch.py").exists()
    assert git(user, "status", "--porcelain").splitlines() == [" M notes.txt", "?? scratch.py"]
    # the run's branch lives in the user's repository, based on the user's HEAD, the workspace under cudagent/
    assert git(user, "merge-base", "main", s["branch"]).strip() == head_before
    files = git(user, "show", "--name-only", "--format=", s["branch"]).split()
    assert files == ["cudagent/axpby_small/model_new.py"]
    assert s["workspace"].endswith("cudagent/axpby_small")


def test_refused_paths_and_protected_files(tmp_path):
    task = write_task(tmp_path / "t")
    outside = tmp_path / "outside.txt"
    steps = [
        {"tool": "write_file", "arguments": {"path": "model.py", "content": "hacked"}},
        {"tool": "write_file", "arguments": {"path": "binding_registry.h", "content": "hacked"}},
        {"tool": "write_file", "arguments": {"path": str(outside), "content": "x"}},
        {"tool": "edit_file", "arguments": {"path": "../../escape.py", "old_str": "a", "new_str": "b"}},
        {"tool": "read_file", "arguments": {"path": "/etc/hostname"}},
        {"tool": "bash", "arguments": {"command": "echo hacked > model.py; echo $OPENAI_API_KEY; echo done"}},
        {"tool": "edit_file", "arguments": {"path": "model.py", "old_str": "alpha", "new_str": "beta"}},
    ]
    with ScriptedServer(from_list(steps)) as server:  # limits: the shell really changes model.py, and it comes back
        args = ["optimize", str(task), *CPU, "--no-final-check", "--sandbox", "limits"]
        proc = cudagent(args, cli_env(tmp_path / "home", server.url))
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    msgs = [m["content"] for m in server.chat_requests[-1]["messages"] if m["role"] == "tool"]
    assert "refused: model.py is fixed" in msgs[0]
    assert "refused: binding_registry.h is fixed" in msgs[1]
    assert "outside the workspace" in msgs[2] and "leaves its folder (..)" in msgs[3]
    assert "outside the workspace" in msgs[4]
    assert "model.py changed or deleted; restored" in msgs[5] and "test-key" not in msgs[5]
    assert "refused: model.py is fixed" in msgs[6]
    assert not outside.exists()
    ws = s["workspace"]
    assert open(f"{ws}/model.py").read() == task.read_text()
    assert git(s["repo"], "log", "--format=%s").splitlines() == ["cudagent: workspace for axpby_small"]


@pytest.mark.parametrize(
    ("flags", "steps", "reason", "turns"),
    [
        (
            ["--max-turns", "3"],
            [{"tool": "read_file", "arguments": {"path": "model.py", "start_line": i}} for i in range(1, 9)],
            "max_turns",
            3,
        ),
        (["--max-format-errors", "2"], [{"text": "I think I should write a kernel."}] * 5, "format_errors", 2),
        (
            ["--max-tokens", "1500"],
            [{"tool": "read_file", "arguments": {"path": "model.py", "start_line": i}} for i in range(1, 30)],
            "tokens",
            None,
        ),
        (
            ["--patience", "3"],
            [{"tool": "bash", "arguments": {"command": f"echo {i}"}} for i in range(10)],
            "patience",
            3,
        ),
        ([], [{"tool": "bash", "arguments": {"command": "ls"}}] * 12, "stuck", 8),
        (["--max-minutes", "0.001"], [{"tool": "bash", "arguments": {"command": "sleep 0.2"}}] * 5, "wall_time", 1),
    ],
    ids=["turns", "format-errors", "tokens", "patience", "stuck", "wall-time"],
)
def test_each_limit_ends_the_run_cleanly(tmp_path, flags, steps, reason, turns):
    task = write_task(tmp_path / "t")
    with ScriptedServer(from_list(steps)) as server:
        proc = cudagent(
            ["optimize", str(task), *CPU, "--no-final-check", *flags], cli_env(tmp_path / "home", server.url)
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["exit_reason"] == reason
    if turns is not None:
        assert s["turns"] == turns
    if reason == "stuck":
        texts = [m["content"] for m in server.chat_requests[-1]["messages"] if m["role"] == "tool"]
        assert any("identical bash call" in t for t in texts)


def test_target_speedup_ends_after_a_good_enough_kernel(tmp_path):
    # The target is far below any honest figure: on a loaded 2-core machine an OpenMP kernel's call took 8 ms against
    # eager's 16 us once (0.006x); what is tested is that reaching the target ends the episode.
    task = write_task(tmp_path / "t")
    steps = SOLVE[1:4] + [{"tool": "profile", "arguments": {}}] + [{"tool": "bash", "arguments": {"command": "ls"}}]
    with ScriptedServer(from_list(steps)) as server:
        proc = cudagent(
            ["optimize", str(task), *CPU, "--target-speedup", "0.0001"], cli_env(tmp_path / "home", server.url)
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["exit_reason"] == "target_reached" and s["turns"] == 4
    assert s["best"]["speedup_vs_compile"] is not None and s["best"]["in_run"]["tier"] >= 1
    # the final re-evaluation rebuilt the best commit from its files alone
    assert s["final"]["commit"] == s["best"]["commit"] and s["final"]["correct"] is True
    msg = git(s["repo"], "log", "-1", "--format=%B", s["best"]["commit"])
    assert "Cudagent-Speedup-Compile: " in msg and "Cudagent-Speedup-Eager: " in msg


def test_resume_after_kill_9_loses_no_turn(tmp_path):
    task = write_task(tmp_path / "t")
    steps = list(SOLVE) + [{"tool": "bash", "arguments": {"command": "sleep 30"}, "sleep": 0}, FINISH]
    home = tmp_path / "home"
    with ScriptedServer(from_list(steps)) as server:
        env = cli_env(home, server.url)
        proc = subprocess.Popen(
            [sys.executable, "-m", "cudagent", "optimize", str(task), *CPU, "--no-final-check"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        seen = []
        for line in proc.stdout:  # kill -9 while turn 6's shell command runs
            seen.append(json.loads(line))
            if seen[-1].get("event") == "turn" and seen[-1]["turn"] == 5:
                time.sleep(1.0)
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        run_id = seen[0]["run_id"]
        again = cudagent(["optimize", "--resume", "last", "--json"], env)
    assert again.returncode == 0, again.stderr[-3000:]
    s = summary(again.stdout)
    assert s["run_id"] == run_id and s["exit_reason"] == "finished" and s["turns"] == 7
    lines = [json.loads(x) for x in (home / "runs" / run_id / "trajectory.jsonl").read_text().splitlines()]
    assert [x["turn"] for x in lines if x["kind"] == "turn"] == list(range(1, 8))
    assert [x["kind"] for x in lines if x["kind"] != "turn"] == ["run", "resume", "end"]
    # the branch holds exactly the recorded commits, in order, and the resumed model saw the whole history
    recorded = [x["commit"] for x in lines if x["kind"] == "turn" and x["commit"]]
    recorded += [a["improved"] for x in lines if x["kind"] == "turn" for a in x["actions"] if a.get("improved")]
    on_branch = git(s["repo"], "rev-list", s["branch"]).split()
    assert set(recorded) <= set(on_branch) and len(on_branch) == len(recorded) + 1
    resumed_first = [r for r in server.chat_requests if sum(m["role"] == "assistant" for m in r["messages"]) == 5]
    assert resumed_first and resumed_first[-1]["messages"][-1]["role"] == "tool"


def test_review_commands_and_export(tmp_path):
    task = write_task(tmp_path / "t")
    home = tmp_path / "home"
    with ScriptedServer(from_list(SOLVE + [FINISH])) as server:
        env = cli_env(home, server.url)
        proc = cudagent(["optimize", str(task), *CPU, "--no-final-check"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    runs = cudagent(["runs", "--json"], env)
    row = json.loads(runs.stdout.splitlines()[-1])
    assert row["run_id"] == s["run_id"] and row["state"] == "finished" and row["best"]["tier"] == 1
    log = cudagent(["log", s["run_id"]], env)
    lines = log.stdout.splitlines()
    assert lines[0].split()[:3] == ["turn", "commit", "model"]  # a header names the columns
    turns = {int(x.split()[0]): x for x in lines if x.strip() and x.split()[0].isdigit()}
    assert len(turns) == 6
    assert "*best*" in turns[5] and "verify" in turns[5] and "tier 1" in turns[5]
    shown = cudagent(["show", "last", "2"], env)
    assert shown.returncode == 0
    assert "--- write_file" in shown.stdout and "+++ b/kernels/axpby_cpu.cpp" in shown.stdout
    missing = cudagent(["show", "last", "99"], env)
    assert missing.returncode == 2 and "no turn 99" in missing.stderr
    dest = tmp_path / "pkg" / "fast_axpby"
    out = cudagent(["export", "last", str(dest)], env)
    assert out.returncode == 0, out.stderr
    assert (dest / "kernels" / "axpby_cpu.cpp").read_text() == KERNEL
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch, fast_axpby; m = fast_axpby.ModelNew(2.0); a, b = torch.randn(100), torch.randn(100); "
            "assert torch.allclose(m(a, b), 2.0 * a + b); print('ok')",
        ],
        cwd=dest.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert check.stdout.strip() == "ok", check.stderr[-3000:]
    again = cudagent(["export", "last", str(dest)], env)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_wrong_kernel_is_not_a_best(tmp_path):
    task = write_task(tmp_path / "t")
    steps = [
        SOLVE[1],
        {"tool": "write_file", "arguments": {"path": "model_new.py", "content": WRONG_MODEL_NEW}},
        {"tool": "verify", "arguments": {}},
    ]
    with ScriptedServer(from_list(steps)) as server:
        proc = cudagent(["optimize", str(task), *CPU], cli_env(tmp_path / "home", server.url))
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["best"] is None and s["final"] is None
    text = [m["content"] for m in server.chat_requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert "REJECTED (tier -1:" in text and "OUTPUT_MISMATCH" in text
    assert [e["event"] for e in events(proc.stdout)].count("improvement") == 0


def test_ctrl_c_stops_the_shell_records_the_interrupt_and_resumes(tmp_path):
    task = write_task(tmp_path / "t")
    marker = tmp_path / "still-running"
    steps = [SOLVE[1], {"tool": "bash", "arguments": {"command": f"sleep 20; touch {marker}"}}, FINISH]
    home = tmp_path / "home"
    with ScriptedServer(from_list(steps)) as server:
        env = cli_env(home, server.url)
        proc = subprocess.Popen(
            [sys.executable, "-m", "cudagent", "optimize", str(task), *CPU, "--no-final-check"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for line in proc.stdout:
            if json.loads(line).get("event") == "turn":  # turn 1 done; turn 2's shell command is starting
                time.sleep(2.0)
                masks = [ln.strip() for ln in open(f"/proc/{proc.pid}/status") if ln.startswith(("SigBlk", "SigIgn"))]
                proc.send_signal(signal.SIGINT)
                break
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "--resume" in err, f"{masks}\n" + _what_happened(home, err)
        # the shell command died with the run: nothing runs it any more (its command line names the marker), so the
        # marker it would have touched after 20 s never comes
        deadline = time.monotonic() + 10
        while _running(str(marker)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(str(marker)) and not marker.exists()
        again = cudagent(["optimize", "--resume", "last", "--json"], env)
    assert again.returncode == 0, again.stderr[-3000:]
    s = summary(again.stdout)
    assert s["exit_reason"] == "finished" and s["turns"] == 3
    kinds = [json.loads(x)["kind"] for x in (home / "runs" / s["run_id"] / "trajectory.jsonl").read_text().splitlines()]
    assert kinds == ["run", "turn", "end", "resume", "turn", "turn", "end"]


def _running(text: str) -> list[str]:
    """The pids of the processes whose command line holds `text`."""
    found = subprocess.run(["pgrep", "-f", text], capture_output=True, text=True).stdout.split()
    return [pid for pid in found if pid != str(os.getpid())]


def _what_happened(home: Path, err: str) -> str:
    """A failed episode's stderr and the tail of its trajectory, for the assertion message."""
    trajectories = sorted(home.glob("runs/*/trajectory.jsonl"))
    tail = trajectories[-1].read_text()[-3000:] if trajectories else "(no trajectory)"
    return f"stderr:\n{err[-2000:]}\ntrajectory tail:\n{tail}"
