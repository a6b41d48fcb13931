"""The episode core, driven in-process by the chat driver with a fake evaluator port: no git, no files, seconds."""

from __future__ import annotations

import asyncio

from cudagent.agent.chat_driver import ChatDriver
from cudagent.agent.episode import EpisodeLimits
from cudagent.agent.recorders import MemoryRecorder, Recorders
from tests.agent.fakes import FakeEvaluator, ScriptedPolicy, call, episode

SLOW = "class ModelNew: pass  # tier 1\n"
FAST = "class ModelNew: pass  # tier 3 # speedup 2.0\n"
WRONG = "class ModelNew: pass  # tier -1\n"


def solve_calls() -> list:
    return [
        call("write_file", path="model_new.py", content=SLOW),
        call("write_file", path="kernels/k.cpp", content="// kernel\n"),
        call("verify"),
        call("write_file", path="model_new.py", content=FAST),
        call("profile"),
        call("write_file", path="model_new.py", content=WRONG),  # a later, worse edit must not lose the best
        call("verify"),
        call("finish", summary="done"),
    ]


def run(ep, policy, recorder=None, final=True):
    recorder = recorder or MemoryRecorder()
    recorders = Recorders(recorder)
    ep.on_improvement = recorders.improved
    return asyncio.run(ChatDriver(ep, policy, recorders, final_evaluation=final).run()), recorder


def test_an_episode_keeps_the_best_kernels_files_and_reevaluates_them_fresh(tmp_path):
    evaluator = FakeEvaluator()
    ep = episode(tmp_path / "ws", evaluator)
    result, rec = run(ep, ScriptedPolicy(solve_calls()))
    assert result.end_reason == "finished" and result.state.turn == 8
    assert result.best.tier == 3 and result.best_files["model_new.py"] == FAST.encode()
    assert result.best_files["kernels/k.cpp"] == b"// kernel\n"
    # the final evaluation judged the best snapshot, in a fresh directory, with timing, not the (worse) live files
    last = evaluator.evaluated[-1]
    assert last["fresh"] and last["timing"] and last["snapshot"]["model_new.py"] == FAST.encode()
    assert result.final.tier == 3 and result.tier == 3
    assert [b.tier for b in rec.improvements] == [1, 3]
    assert len(rec.turns) == 8 and rec.turns[4].improved and not rec.turns[6].improved
    # everything the episode itself added to the history is a tool or user message: what a trainer masks
    for t in rec.turns:
        assert all(m["role"] in ("tool", "user") for m in t.observations)
        assert t.added[-len(t.observations) - 1]["role"] == "assistant"
    assert result.metrics()["tool_validity"] == 1.0


def test_limits_end_an_episode_with_their_reason(tmp_path):
    result, _ = run(
        episode(tmp_path / "a", limits=EpisodeLimits(max_turns=3)), ScriptedPolicy([call("bash", command="true")] * 9)
    )
    assert result.end_reason == "max_turns" and result.state.turn == 3
    result, _ = run(episode(tmp_path / "b", limits=EpisodeLimits(max_format_errors=2)), ScriptedPolicy([]))
    assert result.end_reason == "format_errors" and result.state.invalid_calls == 2
    stuck = ScriptedPolicy([call("read_file", path="model.py")] * 20)
    result, _ = run(episode(tmp_path / "c", limits=EpisodeLimits(stuck_repeats=2)), stuck)
    assert result.end_reason == "stuck" and result.state.turn == 4
    notices = MemoryRecorder()
    result, _ = run(
        episode(tmp_path / "d", limits=EpisodeLimits(max_turns=8)),
        ScriptedPolicy([call("bash", command="true")] * 9),
        notices,
    )
    assert ("turns", 5) in notices.notices  # warned once, three turns before the end


def test_a_malformed_call_is_an_observation_not_a_crash(tmp_path):
    policy = ScriptedPolicy([call("read_file"), call("no_such_tool", x=1), call("finish", summary="")])
    policy.calls[1] = ("no_such_tool", {"x": 1})
    result, rec = run(episode(tmp_path / "ws"), policy, final=False)
    assert result.end_reason == "finished"
    assert "bad arguments" in rec.turns[0].actions[0]["output"]
    assert "there is no tool" in rec.turns[1].actions[0]["output"]


async def _many(tmp_path, n: int, concurrent: bool) -> list:
    def make(i):
        ep = episode(tmp_path / f"{'c' if concurrent else 's'}{i}", FakeEvaluator(delay_s=0.01))
        calls = (
            solve_calls()
            if i % 2 == 0
            else [call("write_file", path="model_new.py", content=WRONG), call("verify")] * 3
        )
        recorders = Recorders(MemoryRecorder())
        ep.on_improvement = recorders.improved
        return ChatDriver(ep, ScriptedPolicy(calls), recorders).run()

    if concurrent:
        return await asyncio.gather(*(make(i) for i in range(n)))
    return [await make(i) for i in range(n)]


def test_32_concurrent_episodes_in_one_event_loop_match_32_run_one_by_one(tmp_path):
    def outcome(r):
        return (r.end_reason, r.state.turn, r.tier, r.best and r.best.tier, len(r.messages), r.state.valid_calls)

    concurrent = asyncio.run(_many(tmp_path, 32, concurrent=True))
    sequential = asyncio.run(_many(tmp_path, 32, concurrent=False))
    assert [outcome(r) for r in concurrent] == [outcome(r) for r in sequential]
    assert {outcome(r)[2] for r in concurrent} == {3, -1}
