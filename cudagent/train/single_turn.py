"""The warm-up stage's episode: one prompt that asks for a whole `model_new.py`, one reply that may use the whole
response length, and the tier of that file as the reward.

    opening = single_turn_opening(task, port)                   the one user message (prompts/single_turn.j2)
    shot = await single_turn(task, port, backend, renderer, opening_ids, response_tokens, sampling)

No tools and no observation: the reply's last fenced ```python block that defines `ModelNew` is the candidate, in
KernelBench's single-file format (its kernels built with load_inline), evaluated once with timing by the same
evaluator as every other stage. A reply with no such block earns -1 (`format_errors`, or `tokens` when the reply ran
out of room before closing it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cudagent.agent.ledger import Ledger
from cudagent.agent.prompting import Prompts
from cudagent.evaluator.port import MODEL_NEW

_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(.*?)```", re.DOTALL)


@dataclass
class SingleShot:
    ledger: Ledger
    tier: int | None
    end_reason: str  # finished (a file was judged), tokens (cut off before its block closed), format_errors
    correct: bool
    speedup_vs_compile: float


def single_turn_opening(task, port) -> list[dict]:
    """The warm-up's conversation before the reply: one user message naming the machine, the task and the format."""
    described = port.describe()
    kind = port.device().get("kind", "cuda")
    text = Prompts().render(
        "single_turn",
        env=described["env"],
        kind=kind,
        task={"name": task.name, "source": task.source},
        baseline=described["baselines"],
    )
    return [{"role": "user", "content": text}]


def model_new_of(reply: str) -> str | None:
    """The candidate in a reply: its last closed ```python block that defines ModelNew (None when there is none).

    >>> model_new_of("Plan.\\n```python\\nimport torch\\nclass ModelNew: pass\\n```\\nDone.")
    'import torch\\nclass ModelNew: pass\\n'
    >>> model_new_of("```python\\nclass ModelNew: pass\\n") is None  # cut off before the fence closed
    True
    """
    blocks = [b for b in _BLOCK.findall(reply) if "ModelNew" in b]
    return blocks[-1] if blocks else None


async def single_turn(task, port, backend, renderer, opening_ids, response_tokens, sampling) -> SingleShot:
    """Ask once for up to `response_tokens` tokens, then judge the file the reply holds (port opened by the caller)."""
    import uuid

    ledger = Ledger(list(opening_ids))
    out = await backend.generate(
        uuid.uuid4().hex,
        prompt_ids=ledger.all_ids(),
        sampling_params={**sampling, "max_tokens": response_tokens},
    )
    ids = list(out.token_ids)
    ledger.add_model(ids, list(out.log_probs))
    ledger.trim()
    code = model_new_of(renderer.decode(ids))
    if code is None:
        stopped = bool(ids) and ids[-1] in renderer.stop_ids
        return SingleShot(ledger, None, "format_errors" if stopped else "tokens", False, 0.0)
    verdict = await port.evaluate({MODEL_NEW: code.encode()}, timing=True, fresh=True)
    return SingleShot(ledger, verdict.tier, "finished", bool(verdict.correct), verdict.speedup_vs_compile or 0.0)
