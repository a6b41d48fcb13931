"""The loop against a real model: transformers' OpenAI-compatible server with SmolLM2-135M on the CPU (the session's
`model_server`).

The model is weak: it writes no usable call most of the time, invents tools and arguments, chats. Whatever it does,
the run must end cleanly within its turns, with a complete trajectory and a git history that matches it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.agent.episodes import cli_env, cudagent, git, summary, write_task

pytestmark = pytest.mark.slow
ENDINGS = {"finished", "max_turns", "format_errors", "stuck", "patience", "tokens", "context"}
TURNS = 4  # each a prefill of the whole conversation on two CPU cores: a few seconds


def test_a_weak_real_model_ends_cleanly_with_a_history_that_matches(tmp_path, model_server):
    task = write_task(tmp_path / "t")
    env = cli_env(tmp_path / "home", model_server.url)
    argv = ["optimize", str(task), "--model", model_server.model, "--device", "cpu", "--json"]
    argv += ["--max-turns", str(TURNS), "--max-format-errors", str(TURNS), "--reply-tokens", "48"]
    proc = cudagent([*argv, "--context-tokens", "8192", "--no-final-check"], env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["exit_reason"] in ENDINGS and 1 <= s["turns"] <= TURNS
    assert s["exit_reason"] != "max_turns" or s["turns"] == TURNS
    lines = [json.loads(x) for x in (Path(s["run_dir"]) / "trajectory.jsonl").read_text().splitlines()]
    turns = [x for x in lines if x["kind"] == "turn"]
    assert lines[0]["kind"] == "run" and lines[-1]["kind"] == "end"
    assert lines[0]["policy"]["model"] == model_server.model
    assert [t["turn"] for t in turns] == list(range(1, s["turns"] + 1))
    for t in turns:  # every turn recorded the model's reply and answered each of its calls
        assert t["messages"][0]["role"] in ("assistant", "user")
        assert t["reply"]["usage"]["completion_tokens"] > 0  # the model did write something
        assert len(t["actions"]) == len(t["reply"]["tool_calls"][:8])
    # the branch is exactly the setup commit plus the commits the trajectory records, and its head is the last
    recorded = {t["commit"] for t in turns if t["commit"]} | {
        a["improved"] for t in turns for a in t["actions"] if a.get("improved")
    }
    on_branch = git(s["repo"], "rev-list", s["branch"]).split()
    assert set(on_branch[:-1]) == recorded
    assert on_branch[0] == turns[-1]["state"]["head"]
    assert git(s["repo"], "status", "--porcelain", "--untracked-files=no").strip() == ""
    log = cudagent(["log", s["run_id"]], env)
    assert log.returncode == 0 and len([x for x in log.stdout.splitlines() if x.split()[0].isdigit()]) == s["turns"]
