"""The text action format, for servers that cannot do native tool calls, and for models that write a call as
text even when they could make one.

A reply ends with one fenced block marked `action` holding {"tool": NAME, "arguments": {...}}. Also understood,
because small models emit them unprompted: a Hermes-style <tool_call>{"name": ..., "arguments": ...}</tool_call>,
and a fenced `json` block holding a call object.
"""

from __future__ import annotations

import json
import re
import uuid

from cudagent.agent.policy import ToolCall

_FENCED = re.compile(r"```(action|json|tool_call|tool)?[ \t]*\n(.*?)```", re.DOTALL)
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_text_action(content: str, tool_names: set[str]) -> tuple[list[ToolCall], str | None]:
    """The calls written in `content`, or ([], why not)."""
    candidates: list[str] = []
    for kind, body in _FENCED.findall(content or ""):
        if kind in ("action", "tool_call", "tool") or (kind in ("json", "") and '"arguments"' in body):
            candidates.append(body)
    candidates += _HERMES.findall(content or "")
    if not candidates:
        return [], "no action found: end the reply with one fenced ```action block holding a JSON object"
    body = candidates[-1].strip()  # the last one is the decision; earlier ones are usually examples or drafts
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return [], f"the action block is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if not isinstance(obj, dict):
        return [], 'the action must be a JSON object {"tool": ..., "arguments": {...}}'
    name = obj.get("tool") or obj.get("name")
    args = obj.get("arguments", obj.get("args", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return [], '"arguments" must be a JSON object'
    if not isinstance(name, str):
        return [], 'the action names no tool: give {"tool": NAME, "arguments": {...}}'
    call = ToolCall(id=f"text-{uuid.uuid4().hex[:12]}", name=name, arguments=None, raw_arguments=json.dumps(args))
    if not isinstance(args, dict):
        call.error = '"arguments" must be a JSON object'
    elif name not in tool_names:
        call.error = f"there is no tool {name!r}; use one of {', '.join(sorted(tool_names))}"
    else:
        call.arguments = args
    return [call], None


def native_call(call_id: str, name: str, raw_arguments: str | None, tool_names: set[str]) -> ToolCall:
    """A native tool call from the server, with its arguments decoded (or the reason they cannot be)."""
    raw = raw_arguments or "{}"
    call = ToolCall(id=call_id or f"call-{uuid.uuid4().hex[:12]}", name=name or "", arguments=None, raw_arguments=raw)
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        call.error = f"the arguments of {name} are not valid JSON ({exc.msg}); send a JSON object"
        return call
    if not isinstance(args, dict):
        call.error = f"the arguments of {name} must be a JSON object"
    elif name not in tool_names:
        call.error = f"there is no tool {name!r}; use one of {', '.join(sorted(tool_names))}"
    else:
        call.arguments = args
    return call
