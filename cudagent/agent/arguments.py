"""A tool call's arguments checked against the tool's schema before anything runs.

The schema is the one the model is shown (tools.TOOL_SPECS): JSON types, `minimum`/`maximum` for numbers,
`maxLength` for strings. What does not fit is refused with one sentence naming the argument and what it must be;
unknown arguments are dropped (small models invent some). Strings may not hold a NUL character (no path or command
can), integers may come as integral numbers (`5.0`) but never as text, booleans or infinities.

    >>> spec = {"name": "read_file", "parameters": {"type": "object", "required": ["path"],
    ...         "properties": {"path": {"type": "string"}, "start_line": {"type": "integer", "minimum": 1}}}}
    >>> checked(spec, {"path": "a.cu", "start_line": 3.0, "colour": "red"})
    {'path': 'a.cu', 'start_line': 3}
    >>> checked(spec, {"path": "a.cu", "start_line": "abc"})
    Traceback (most recent call last):
    ...
    cudagent.agent.arguments.BadArguments: start_line must be a whole number, not the text 'abc'
"""

from __future__ import annotations

import math

DEFAULT_MAX_CHARS = 4 << 20  # a string argument (a whole kernel file fits many times over)


class BadArguments(ValueError):
    """Arguments that do not fit the tool's schema; the message says which and why, for the model."""


def checked(spec: dict, args: dict | None) -> dict:
    """`args` restricted to what `spec` declares and converted (integral floats to int); BadArguments otherwise."""
    params = spec["parameters"]
    known = params.get("properties", {})
    args = args if isinstance(args, dict) else {}
    missing = [name for name in params.get("required", []) if args.get(name) is None]
    if missing:
        raise BadArguments(f"{spec['name']} needs {', '.join(missing)}")
    out = {}
    for name, value in args.items():
        if name not in known or value is None:
            continue
        out[name] = _value(name, value, known[name])
    return out


def _value(name: str, value, schema: dict):
    kind = schema.get("type", "string")
    if kind == "string":
        if not isinstance(value, str):
            raise BadArguments(f"{name} must be a string, not {_shown(value)}")
        if "\0" in value:
            raise BadArguments(f"{name} holds a NUL character, which no path or command can hold")
        limit = schema.get("maxLength", DEFAULT_MAX_CHARS)
        if len(value) > limit:
            raise BadArguments(f"{name} is {len(value)} characters long; at most {limit} are accepted")
        return value
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadArguments(f"{name} must be a whole number, not {_shown(value)}")
        if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
            raise BadArguments(f"{name} must be a whole number, not {value!r}")
        value = int(value)
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise BadArguments(f"{name} must be {bounds}, not {value}")
        return value
    raise BadArguments(f"{name}: the schema's type {kind!r} is not understood")  # a bug in TOOL_SPECS, said plainly


def _shown(value) -> str:
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    return f"{type(value).__name__} {str(value)[:40]}"
