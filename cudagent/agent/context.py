"""What of the history fits the model's context window: a token estimate, and deterministic elision of the
oldest observations (the saved trajectory always keeps everything)."""

from __future__ import annotations

import json

CHARS_PER_TOKEN = 3.5  # a conservative estimate for code and English; elision only needs the order of magnitude
KEEP_RECENT_MESSAGES = 8


def estimate_tokens(messages: list[dict]) -> int:
    return int(
        sum(len(m.get("content") or "") + len(json.dumps(m.get("tool_calls") or "")) for m in messages)
        / CHARS_PER_TOKEN
    ) + 4 * len(messages)


def elide(messages: list[dict], budget_tokens: int) -> list[dict]:
    """Replace the oldest observations (then the oldest long assistant texts) by a one-line stub until the
    history fits. The opening two messages and the last two are never touched, the last KEEP_RECENT_MESSAGES only
    when nothing older is left. Deterministic: the same history and budget always give the same context."""
    if estimate_tokens(messages) <= budget_tokens:
        return messages
    out = [dict(m) for m in messages]
    total = estimate_tokens(out)
    passes = [(keep, roles) for keep in (KEEP_RECENT_MESSAGES, 2) for roles in (("tool", "user"), ("assistant",))]
    for keep, roles in passes:
        protected = set(range(min(2, len(out)))) | set(range(max(0, len(out) - keep), len(out)))
        for i, m in enumerate(out):
            if total <= budget_tokens:
                return out
            if i in protected or m.get("role") not in roles:
                continue
            content = m.get("content") or ""
            if len(content) < 400:
                continue
            stub = f"[elided to fit the context window: {len(content)} characters; the full text is in the trajectory]"
            total -= int((len(content) - len(stub)) / CHARS_PER_TOKEN)
            out[i] = {**m, "content": stub}
    return out
