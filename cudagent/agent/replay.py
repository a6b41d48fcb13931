"""A replay: recorded tool calls played back as a chat policy, so the whole loop can be seen on any machine.

    cudagent optimize examples/tasks/axpby.py --replay examples/replays/kernels-cpu.json --device cpu

Everything but the model is real: the episode, the tools, the evaluator (build, audits, trials, timing), the run's
git and the trajectory; only the replies come from a file instead of a model server. A run played so says it
everywhere: the model is `replay:<file>` in the run's header, its trajectory and every commit's Cudagent-Model
trailer, and `cudagent runs` lists it under that name. Nothing is learned or searched: a replay shows what the loop
does with a good policy's calls, never what a model would do.

A replay file (JSON):

    {"description": "...",
     "episodes": [{"match": "self.alpha * a + b",            the first episode whose text occurs in the task runs
                   "capture": {"call": "self\\.op = (nn\\.Linear\\(.*?\\))"},   values read from the task (regexes)
                   "replies": [{"content": "...", "calls": [{"tool": "write_file", "arguments": {...}}]}, ...]}]}

A reply's strings may use a capture as `{{ call }}` (jinja2, StrictUndefined): one replay serves every task of a
kind (a Linear at any width, say). Reply k answers the k-th turn; past the last one, the run finishes.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import jinja2

from cudagent.agent.policy import PolicyError, PolicyReply, ToolCall, Usage
from cudagent.errors import CudagentError


class ReplayError(CudagentError):
    """The replay file cannot be played (missing, not JSON, a reply that names no tool); the message says where."""


class ReplayPolicy:
    action_format = "tools"
    context_tokens: int | None = None
    max_tokens: int | None = None

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            text = self.path.read_text()
            self.replay = json.loads(text)
        except OSError as exc:
            raise ReplayError(f"the replay {self.path} cannot be read ({exc.strerror}); give a replay file") from None
        except json.JSONDecodeError as exc:
            raise ReplayError(f"the replay {self.path} is not JSON ({exc.msg} at line {exc.lineno})") from None
        self.sha256 = hashlib.sha256(text.encode()).hexdigest()
        self.model = f"replay:{self.path.name}"
        self._templates = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
        self._check()

    def _check(self) -> None:
        from cudagent.agent.tools import TOOL_NAMES

        episodes = self.replay.get("episodes") if isinstance(self.replay, dict) else None
        if not isinstance(episodes, list) or not episodes:
            raise ReplayError(f"the replay {self.path} holds no episodes: give {{'episodes': [{{'replies': [...]}}]}}")
        for i, episode in enumerate(episodes):
            for k, reply in enumerate(episode.get("replies") or []):
                for call in reply.get("calls") or []:
                    if call.get("tool") not in TOOL_NAMES:
                        raise ReplayError(
                            f"{self.path}: episode {i}, reply {k} calls no known tool ({call.get('tool')})"
                        )

    def prepare(self) -> None:
        """Nothing to reach: the replies are in the file."""

    def describe(self) -> dict:
        return {
            "kind": "replay",
            "model": self.model,
            "file": str(self.path.resolve()),
            "sha256": self.sha256,
            "note": "recorded tool calls played back; not a model",
        }

    async def reply(self, messages: list[dict], tools: list[dict]) -> PolicyReply:
        task = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        episode = next((e for e in self.replay["episodes"] if (e.get("match") or "") in task), None)
        if episode is None:
            raise PolicyError(f"the replay {self.path.name} has no episode for this task (no `match` occurs in it)")
        values = {}
        for name, pattern in (episode.get("capture") or {}).items():
            found = re.search(pattern, task, re.DOTALL)
            if found is None:
                raise PolicyError(f"the replay {self.path.name}: the task holds nothing its capture {name!r} reads")
            values[name] = found.group(1)
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        replies = episode.get("replies") or []
        recorded = replies[turn] if turn < len(replies) else {"calls": [{"tool": "finish", "arguments": {}}]}
        content = self._fill(recorded.get("content") or "", values)
        calls = [
            ToolCall(f"replay-{turn}-{i}", c["tool"], args, json.dumps(args))
            for i, c in enumerate(recorded.get("calls") or [])
            for args in [self._fill(c.get("arguments") or {}, values)]
        ]
        message = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
                for c in calls
            ]
        return PolicyReply(content, calls, Usage(), message, format_error=None if calls else "the reply called no tool")

    def _fill(self, value, values: dict):
        if isinstance(value, str):
            return self._templates.from_string(value).render(**values) if "{{" in value else value
        if isinstance(value, dict):
            return {k: self._fill(v, values) for k, v in value.items()}
        if isinstance(value, list):
            return [self._fill(v, values) for v in value]
        return value
