"""The chat driver's and the tools' own rules: elision, context overflow, tool behaviour."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cudagent.agent.context import KEEP_RECENT_MESSAGES, elide, estimate_tokens
from cudagent.agent.tools import Toolbox
from cudagent.workspace import Workspace
from tests.agent.episodes import cli_env, cudagent, summary, write_task
from tests.agent.script_server import ScriptedServer, from_list


def _history(n: int, size: int) -> list[dict]:
    msgs = [{"role": "system", "content": "S" * size}, {"role": "user", "content": "T" * size}]
    for i in range(n):
        msgs.append({"role": "assistant", "content": f"a{i}", "tool_calls": []})
        msgs.append({"role": "tool", "tool_call_id": str(i), "content": f"{i}" * size})
    return msgs


def test_elision_is_deterministic_and_spares_the_opening_and_the_recent():
    msgs = _history(20, 2000)
    budget = estimate_tokens(msgs) // 2
    a, b = elide(msgs, budget), elide(msgs, budget)
    assert a == b and estimate_tokens(a) <= budget
    assert a[:2] == msgs[:2] and a[-KEEP_RECENT_MESSAGES:] == msgs[-KEEP_RECENT_MESSAGES:]
    assert a[2]["content"] == "a0" and a[3]["content"].startswith("[elided")
    assert msgs[3]["content"] == "0" * 2000  # the history itself is untouched
    assert elide(msgs, 10**9) is msgs
    tight = elide(msgs, estimate_tokens(msgs[:2] + msgs[-2:]) + 600)  # only the last two are spared then
    assert tight[-2:] == msgs[-2:] and tight[-3]["content"].startswith("[elided")


@pytest.mark.slow
def test_context_overflow_shrinks_the_context_and_goes_on(tmp_path):
    task = write_task(tmp_path / "t")
    steps = [{"tool": "bash", "arguments": {"command": f"python3 -c \"print('{i}' * 3000)\""}} for i in range(8)]
    with ScriptedServer(from_list(steps), context_chars=16000) as server:
        proc = cudagent(
            ["optimize", str(task), "--device", "cpu", "--json", "--max-turns", "8", "--no-final-check"],
            cli_env(tmp_path / "home", server.url),
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["exit_reason"] == "max_turns" and s["turns"] == 8
    last = server.chat_requests[-1]["messages"]
    assert any("[elided" in (m.get("content") or "") for m in last)
    traj = [json.loads(x) for x in (Path(s["run_dir"]) / "trajectory.jsonl").read_text().splitlines()]
    # the saved trajectory keeps every observation whole
    outputs = [a["output"] for t in traj if t["kind"] == "turn" for a in t["actions"]]
    assert all(o.count(str(i)) >= 3000 for i, o in enumerate(outputs))


def test_tools_cut_long_outputs_to_head_and_tail_and_kill_on_timeout(tmp_path):
    ws = Workspace.create(tmp_path / "ws", "print('reference')\n")
    box = Toolbox(ws, "print('reference')\n", None)
    long = asyncio.run(box.run("bash", {"command": "seq 1 200000"}))
    assert long.full_text is not None and "characters omitted" in long.text and len(long.text) < 12000
    assert long.text.startswith("1\n2\n") and "200000" in long.text
    slow = asyncio.run(box.run("bash", {"command": "sleep 30 & sleep 30", "timeout": 1}))
    assert "killed" in slow.text and slow.seconds < 10 and not slow.ok
    edit = asyncio.run(box.run("write_file", {"path": "kernels/a.cu", "content": "x = 1\nx = 1\n"}))
    assert edit.ok
    twice = asyncio.run(box.run("edit_file", {"path": "kernels/a.cu", "old_str": "x = 1", "new_str": "y"}))
    assert "occurs 2 times" in twice.text and not twice.ok
    missing = asyncio.run(box.run("read_file", {}))
    assert "bad arguments" in missing.text
