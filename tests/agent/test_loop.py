"""The loop's own rules: elision, context overflow, a token-level policy, tool behaviour."""

from __future__ import annotations

import json
from pathlib import Path

from cudagent.agent.context import KEEP_RECENT_MESSAGES, elide, estimate_tokens
from cudagent.agent.policy import PolicyReply, ToolCall, Usage
from cudagent.agent.runner import PolicySettings, RunOptions, start_run
from cudagent.agent.tools import Toolbox
from cudagent.agent.ui import JsonEvents
from cudagent.workspace import Workspace
from tests.agent.episodes import FINISH, cli_env, cudagent, summary, write_task
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


class TokenPolicy:
    """A token-level policy as training would plug in: exact ids and logprobs, no history edits allowed."""

    model = "token-policy"
    action_format = "tools"
    tokenizes = True
    max_tokens = None

    def __init__(self, calls):
        self.calls, self.seen = list(calls), []

    def prepare(self):
        pass

    def describe(self):
        return {"kind": "token-level", "model": self.model}

    def reply(self, messages, tools):
        self.seen.append(len(messages))
        name, args = self.calls.pop(0)
        call = ToolCall(id=f"t{len(self.seen)}", name=name, arguments=args, raw_arguments=json.dumps(args))
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": name, "arguments": call.raw_arguments}}
            ],
        }
        return PolicyReply("", [call], Usage(10, 3), message, token_ids=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3])


def test_a_token_level_policy_gets_the_whole_history_and_its_tokens_are_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAGENT_HOME", str(tmp_path / "home"))
    task = write_task(tmp_path / "t")
    policy = TokenPolicy(
        [("read_file", {"path": "model.py"}), ("bash", {"command": "ls"}), (FINISH["tool"], FINISH["arguments"])]
    )
    events = tmp_path / "events.jsonl"
    with open(events, "w") as stream:
        s = start_run(
            task, PolicySettings(), RunOptions(device="cpu", final_evaluation=False), JsonEvents(stream), policy=policy
        )
    assert s["exit_reason"] == "finished" and s["turns"] == 3
    assert policy.seen == [2, 4, 6]  # every message, never elided
    turns = [json.loads(x) for x in (Path(s["run_dir"]) / "trajectory.jsonl").read_text().splitlines()][1:4]
    assert all(t["reply"]["token_ids"] == [1, 2, 3] and t["reply"]["logprobs"] == [-0.1, -0.2, -0.3] for t in turns)
    # observations are the messages the loop added itself: tool or user roles, the ones a trainer masks
    assert [m["role"] for t in turns for m in t["messages"]] == ["assistant", "tool"] * 3


def test_tools_cut_long_outputs_to_head_and_tail_and_kill_on_timeout(tmp_path):
    ws = Workspace.create(tmp_path / "ws", "print('reference')\n")
    box = Toolbox(ws, "print('reference')\n", evaluator_factory=None)
    long = box.run("bash", {"command": "seq 1 200000"})
    assert long.full_text is not None and "characters omitted" in long.text and len(long.text) < 12000
    assert long.text.startswith("1\n2\n") and "200000" in long.text
    slow = box.run("bash", {"command": "sleep 30 & sleep 30", "timeout": 1})
    assert "killed" in slow.text and slow.seconds < 10 and not slow.ok
    edit = box.run("write_file", {"path": "kernels/a.cu", "content": "x = 1\nx = 1\n"})
    assert edit.ok
    twice = box.run("edit_file", {"path": "kernels/a.cu", "old_str": "x = 1", "new_str": "y"})
    assert "occurs 2 times" in twice.text and not twice.ok
    missing = box.run("read_file", {})
    assert "bad arguments" in missing.text
