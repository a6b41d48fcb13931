"""`--replay`: recorded tool calls played through the real loop (agent/replay.py), and the README's first command,
which shows the whole loop with no GPU and no model server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cudagent.agent.policy import PolicyError
from cudagent.agent.replay import ReplayError, ReplayPolicy

ROOT = Path(__file__).resolve().parents[2]
REPLAY = ROOT / "examples" / "replays" / "kernels-cpu.json"


def test_a_replay_plays_the_episode_its_task_matches_with_what_it_reads_from_the_task(tmp_path):
    policy = ReplayPolicy(REPLAY)
    assert policy.describe()["kind"] == "replay" and policy.model == "replay:kernels-cpu.json"
    task = {"role": "user", "content": "class Model(nn.Module):\n    self.op = nn.Linear(64, 256, bias=True).to(x)\n"}
    history = [{"role": "system", "content": "s"}, task]
    first = asyncio.run(policy.reply(history, []))
    assert [c.name for c in first.tool_calls] == ["read_file"] and first.message["tool_calls"]
    history += [first.message, {"role": "tool", "content": "ok"}] * 2
    written = asyncio.run(policy.reply(history, []))  # reply 2: model_new.py, with the task's own constructor call
    call = written.tool_calls[0]
    assert (
        call.arguments["path"] == "model_new.py"
        and "self.op = nn.Linear(64, 256, bias=True)\n" in call.arguments["content"]
    )
    with pytest.raises(PolicyError, match="no episode for this task"):
        asyncio.run(policy.reply([{"role": "user", "content": "something else entirely"}], []))


def test_a_bad_replay_file_is_one_sentence(tmp_path):
    bad = tmp_path / "bad.json"
    for text, said in (("{not json", "is not JSON"), ('{"episodes": []}', "holds no episodes")):
        bad.write_text(text)
        with pytest.raises(ReplayError, match=said):
            ReplayPolicy(bad)
    bad.write_text(json.dumps({"episodes": [{"replies": [{"calls": [{"tool": "rm_rf"}]}]}]}))
    with pytest.raises(ReplayError, match="calls no known tool"):
        ReplayPolicy(bad)
    with pytest.raises(ReplayError, match="cannot be read"):
        ReplayPolicy(tmp_path / "missing.json")


def test_the_replays_are_what_make_py_writes():
    before = {p.name: p.read_text() for p in (ROOT / "examples" / "replays").glob("*.json")}
    subprocess.run([sys.executable, str(ROOT / "examples" / "replays" / "make.py")], check=True, capture_output=True)
    after = {p.name: p.read_text() for p in (ROOT / "examples" / "replays").glob("*.json")}
    assert before == after, "examples/replays/*.json differ from what make.py writes: run it and commit"


@pytest.mark.slow
def test_the_readme_first_command_shows_the_whole_loop(tmp_path):
    """The Quickstart's first command, as written, after its install: a kernel written, compiled, verified,
    profiled and committed by the real loop, then the log; the run says it was a replay."""
    readme = (ROOT / "README.md").read_text()
    first = next(ln for ln in readme.splitlines() if ln.startswith("python3 -m venv") and "pytest" not in ln)
    commands = [c.strip() for c in first.split("&&") if c.strip().startswith("cudagent ")]
    assert [c.split()[1] for c in commands] == ["optimize", "log"], commands
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    env.update(CUDAGENT_HOME=str(tmp_path / "home"), PYTHONWARNINGS="ignore")
    outputs = []
    try:
        for command in commands:
            argv = [sys.executable, "-m", "cudagent", *shlex.split(command)[1:]]
            done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
            assert done.returncode == 0, (command, done.stderr[-3000:])
            outputs.append(done.stdout + done.stderr)
    finally:  # the run's branch and worktree live in this repository: take them away again
        subprocess.run([sys.executable, "-m", "cudagent", "prune", "--all", "--yes"], cwd=ROOT, env=env)
    played, log = outputs
    assert "model replay:kernels-cpu.json" in played and "ended by finished" in played, played
    for tool in ("compile", "verify", "profile", "finish"):
        assert re.search(rf"^\s+\d+ .*{tool}", log, re.MULTILINE), (tool, log)
    assert "*best*" in log and "tier" in log, log


@pytest.mark.slow
def test_a_model_run_played_from_the_replay_puts_back_and_reports(tmp_path):
    """The README's model-run example with no model server (here on smaller inputs and one spot of each kind the
    replay knows): every spot's episode is played, verified and put back, and report.md is written."""
    readme = (ROOT / "README.md").read_text()
    assert "--replay examples/replays/kernels-cpu.json --device cpu" in readme and "--by modules" in readme
    model = tmp_path / "block.py"
    model.write_text((ROOT / "examples" / "models" / "block.py").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    env.update(CUDAGENT_HOME=str(tmp_path / "home"), PYTHONWARNINGS="ignore")
    argv = [sys.executable, "-m", "cudagent", "optimize", f"{model}:Block", "--init", "[64, 2, 128]"]
    argv += ["--inputs", "x=f32[2,16,64]", "--by", "modules", "--top", "2", "--keep-slower", "--no-final-check"]
    argv += ["--replay", str(REPLAY), "--device", "cpu", "--json"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    played = [s for s in record["spots"] if s.get("run_id")]
    assert played and all(s["outcome"] == "kernel" for s in played), record["spots"]
    assert record["result"]["correct"] is True, record["result"]
    report = (Path(record["result"]["package"]).parent / "report.md").read_text()
    assert "kernels put back" in report and "replay" not in report.split("\n")[0]
