"""In-process stand-ins for the pieces an episode talks to: an evaluator port and a chat policy.

The fake evaluator judges a snapshot by a marker in model_new.py (`# tier N`, `# speedup X`), so episodes run in
milliseconds; the real evaluator is exercised by the CLI episode tests and the evaluator's own tests.
"""

from __future__ import annotations

import asyncio
import json
import re

from cudagent.agent.environment import open_episode
from cudagent.agent.episode import Episode, EpisodeLimits
from cudagent.agent.policy import PolicyReply, ToolCall, Usage
from cudagent.agent.prompting import Prompts
from cudagent.evaluator.toolchain.extension import BuildResult
from cudagent.evaluator.verdict import Verdict
from cudagent.task import Task
from cudagent.workspace import Workspace

TASK_SOURCE = "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


class FakeEvaluator:
    """Judges `# tier N` / `# speedup X` markers in model_new.py; counts and remembers what it was sent."""

    def __init__(self, delay_s: float = 0.0):
        self.delay_s = delay_s
        self.evaluated: list[dict] = []
        self.closed = False

    async def build(self, snapshot):
        await asyncio.sleep(self.delay_s)
        return BuildResult(ok=True, seconds=0.0)

    async def evaluate(self, snapshot, timing, fresh=False):
        await asyncio.sleep(self.delay_s)
        self.evaluated.append({"snapshot": dict(snapshot), "timing": timing, "fresh": fresh})
        text = snapshot.get("model_new.py", b"").decode()
        tier = re.search(r"# tier (-?\d)", text)
        speed = re.search(r"# speedup ([\d.]+)", text)
        v = Verdict(task={"name": "fake"}, device={"kind": "cpu"})
        if tier is None or int(tier.group(1)) < 0:
            v.reject("OUTPUT_MISMATCH", "[stock-1] wrong")
            return v
        v.correct = True
        x = float(speed.group(1)) if speed else 1.0
        v.set_times(1.0 * x, 1.0 * x, 1.0 if timing else None)
        v.tier = int(tier.group(1))
        return v

    async def open(self, fail_fast=False):
        self.opened = True

    def describe(self):
        return {
            "env": {"gpu": "fake", "arch": "host", "device": "cpu", "cuda": "none", "torch": "x"},
            "baselines": None,
        }

    def device(self):
        return {"kind": "cpu", "name": "fake"}

    async def close(self):
        self.closed = True


def call(name: str, **arguments) -> tuple[str, dict]:
    return name, arguments


class ScriptedPolicy:
    """Replies with the next scripted tool call as a native call; `seen` holds the history length of each ask."""

    model = "scripted"
    action_format = "tools"
    context_tokens = None
    max_tokens = None

    def __init__(self, calls: list[tuple[str, dict]]):
        self.calls, self.seen = list(calls), []

    def prepare(self) -> None:
        pass

    def describe(self) -> dict:
        return {"kind": "scripted", "model": self.model}

    async def reply(self, messages, tools):
        await asyncio.sleep(0)
        self.seen.append(len(messages))
        if not self.calls:
            return PolicyReply("nothing to do", [], Usage(5, 1), {"role": "assistant", "content": "nothing to do"})
        name, args = self.calls.pop(0)
        c = ToolCall(id=f"c{len(self.seen)}", name=name, arguments=args, raw_arguments=json.dumps(args))
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": c.id, "type": "function", "function": {"name": name, "arguments": c.raw_arguments}}],
        }
        return PolicyReply("", [c], Usage(10, 3), message)


def episode(root, evaluator=None, limits=None, action_format="tools", **kw) -> Episode:
    ws = Workspace.create(root, TASK_SOURCE)
    evaluator = evaluator or FakeEvaluator()
    limits = limits or EpisodeLimits(max_turns=20)
    return open_episode(Task("fake", TASK_SOURCE), ws, evaluator, limits, action_format, prompts=Prompts(), **kw)
