"""The OpenAI-compatible policy against a real local HTTP server: tool-call fallbacks, retries, errors."""

from __future__ import annotations

import asyncio

import pytest

from cudagent.agent.actions import parse_text_action
from cudagent.agent.openai_policy import OpenAIChatPolicy
from cudagent.agent.policy import ContextOverflow, PolicyError
from cudagent.agent.tools import TOOL_NAMES, openai_tools
from tests.agent.script_server import ScriptedServer

HISTORY = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


def policy(server, **kw) -> OpenAIChatPolicy:
    p = OpenAIChatPolicy(base_url=server.url, api_key="k", sleep=lambda s: None, **kw)
    p.prepare()
    return p


def test_native_tool_calls_and_default_model():
    with ScriptedServer(lambda i, m: {"tool": "read_file", "arguments": {"path": "model.py"}}) as server:
        p = policy(server)
        reply = asyncio.run(p.reply(HISTORY, openai_tools()))
    assert p.model == "scripted-model" and p.mode == "auto" and p.action_format == "tools"
    assert reply.tool_calls[0].name == "read_file" and reply.tool_calls[0].arguments == {"path": "model.py"}
    assert reply.message["tool_calls"][0]["id"] == reply.tool_calls[0].id
    assert reply.usage.completion_tokens == 20 and reply.format_error is None
    assert server.chat_requests[-1]["tool_choice"] == "auto"


def test_falls_back_to_required_when_auto_is_refused():
    with ScriptedServer(lambda i, m: {"tool": "compile", "arguments": {}}, tool_choice=("required",)) as server:
        p = policy(server)
        reply = asyncio.run(p.reply(HISTORY, openai_tools()))
    assert p.mode == "required" and reply.tool_calls[0].name == "compile"
    assert server.chat_requests[-1]["tool_choice"] == "required"


def test_falls_back_to_text_actions_without_tool_support():
    action = '{"tool": "edit_file", "arguments": {"path": "a", "old_str": "x", "new_str": "y"}}'
    text = f"I will compile.\n```action\n{action}\n```"
    with ScriptedServer(lambda i, m: {"text": text}, tool_choice=()) as server:
        p = policy(server)
        history = HISTORY + [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "compile", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "build OK"},
        ]
        reply = asyncio.run(p.reply(history, openai_tools()))
    assert p.mode == "text" and p.action_format == "text"
    assert reply.tool_calls[0].name == "edit_file" and reply.tool_calls[0].arguments["new_str"] == "y"
    sent = server.chat_requests[-1]
    assert "tools" not in sent and all(m["role"] != "tool" for m in sent["messages"])
    assert sent["messages"][-1] == {"role": "user", "content": "build OK"}


def test_retries_rate_limits_and_server_errors_then_succeeds():
    script = {"times": 3, "status": 429, "then": {"times": 4, "status": 503, "then": {"tool": "verify"}}}
    with ScriptedServer(lambda i, m: script) as server:
        p = policy(server, max_attempts=8)
        reply = asyncio.run(p.reply(HISTORY, openai_tools()))
    assert reply.tool_calls[0].name == "verify" and reply.attempts == 5


def test_gives_up_after_its_attempts():
    with ScriptedServer(lambda i, m: {"status": 500}) as server:
        p = policy(server, max_attempts=3)
        with pytest.raises(PolicyError) as info:
            asyncio.run(p.reply(HISTORY, openai_tools()))
    assert info.value.retryable and len(server.chat_requests) == 3


def test_no_retry_for_auth_errors():
    with ScriptedServer(lambda i, m: {"status": 401, "body": {"error": {"message": "bad key"}}}) as server:
        p = policy(server)
        with pytest.raises(PolicyError) as info:
            asyncio.run(p.reply(HISTORY, openai_tools()))
    assert not info.value.retryable and "OPENAI_API_KEY" in info.value.message
    assert len(server.chat_requests) == 1


def test_context_overflow_is_its_own_error():
    with ScriptedServer(lambda i, m: {"tool": "verify"}, context_chars=10) as server:
        p = policy(server)
        with pytest.raises(ContextOverflow):
            asyncio.run(p.reply(HISTORY + [{"role": "user", "content": "x" * 100}], openai_tools()))
    assert len(server.chat_requests) == 1


def test_unreadable_answers_are_retried():
    script = {"times": 2, "garbage": "{not json", "then": {"tool": "profile"}}
    with ScriptedServer(lambda i, m: script) as server:
        p = policy(server)
        reply = asyncio.run(p.reply(HISTORY, openai_tools()))
    assert reply.tool_calls[0].name == "profile" and reply.attempts == 3


def test_malformed_arguments_and_unknown_tools_are_reported_not_run():
    with ScriptedServer(lambda i, m: {"calls": [("bash", {}), ("launch_rockets", {})], "raw_arguments": "{bad"}) as s:
        reply = asyncio.run(policy(s).reply(HISTORY, openai_tools()))
    assert [c.arguments for c in reply.tool_calls] == [None, None]
    assert "not valid JSON" in reply.tool_calls[0].error and "not valid JSON" in reply.tool_calls[1].error


def test_unreachable_server_is_an_error_with_the_url():
    p = OpenAIChatPolicy(
        base_url="http://127.0.0.1:9/v1", api_key="k", max_attempts=2, sleep=lambda s: None, timeout_s=5
    )
    with pytest.raises(PolicyError) as info:
        p.prepare()
    assert "127.0.0.1:9" in info.value.message and "nothing is listening" in info.value.message


@pytest.mark.parametrize(
    ("content", "name", "error"),
    [
        ('```action\n{"tool": "verify", "arguments": {}}\n```', "verify", None),
        ('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>', "bash", None),
        ('```json\n{"name": "compile", "arguments": {}}\n```', "compile", None),
        ("I would like to compile now.", None, "no action found"),
        ('```action\n{"tool": "verify", "arguments": {}\n```', None, "not valid JSON"),
        ('```action\n{"tool": "fly", "arguments": {}}\n```', "fly", "there is no tool"),
    ],
)
def test_text_actions(content, name, error):
    calls, why = parse_text_action(content, TOOL_NAMES)
    if name is None:
        assert calls == [] and error in why
    else:
        assert calls[0].name == name
        assert (calls[0].error is None) if error is None else (error in calls[0].error)


def test_a_reply_without_a_tool_call_in_native_mode_is_told_to_call_a_tool():
    """Offered tools natively, a reply of plain text was told to write a fenced `action` block (the text format's
    fix, found with SmolLM2 in the walkthrough); it is told to call a tool."""
    with ScriptedServer(lambda i, m: {"text": "I would like to compile now."}) as s:
        p = policy(s)
        p.prepare()
        reply = asyncio.run(p.reply(HISTORY, openai_tools()))
    assert p.mode in ("auto", "required") and reply.tool_calls == []
    assert reply.format_error.startswith("the reply called no tool"), reply.format_error
