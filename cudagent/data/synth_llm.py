"""Tasks composed by a language model: 1-5 seed tasks (drawn from the seed number) shown to any OpenAI-compatible
server through the same client and retry policy `optimize` uses, with the prompt prompts/data_compose.j2; the file
in its answer becomes a task. An answer without usable code (a weak model, a refusal) is recorded with its reason
in OUT/synth.jsonl and the run goes on; the filters judge the rest."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

from cudagent.data.compose import seed_task
from cudagent.data.io import is_task_code
from cudagent.data.ops import OPS

_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str | None:
    """The task file in an answer: the last fenced block that is task code, or the whole answer if it is."""
    for block in reversed(_BLOCK.findall(text or "")):
        if is_task_code(block):
            return block.strip() + "\n"
    return text.strip() + "\n" if is_task_code((text or "").strip()) else None


def draw_seeds(seed: int, scale: str, max_ops: int) -> list:
    rng = random.Random(seed)
    return [seed_task(op.name, scale) for op in rng.sample(OPS, rng.randint(1, max_ops))]


async def compose_with_model(policy, prompts, first_seed: int, count: int, out: Path, scale: str, max_ops: int,
                             on_task=None) -> list[dict]:  # fmt: skip
    """Ask the model for `count` tasks; write each usable one to OUT/<name>.py and every outcome to synth.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        seed = first_seed + i
        seeds = draw_seeds(seed, scale, max_ops)
        prompt = prompts.render("data_compose", seeds=[{"name": s.name, "source": s.source} for s in seeds])
        names = [s.name for s in seeds]
        row = {"seed": seed, "ops": names}
        try:
            reply = await policy.reply([{"role": "user", "content": prompt}], [])
        except Exception as exc:  # noqa: BLE001  (a failed request drops this task, with why; the run goes on)
            row["dropped"] = f"the request failed: {getattr(exc, 'message', None) or exc}"[:300]
        else:
            code = extract_code(reply.content)
            if code is None:
                row["dropped"] = "the answer holds no task file (Model, get_inputs, get_init_inputs in one block)"
                row["answer_head"] = (reply.content or "")[:200]
            else:
                name = f"llm_{seed:05d}_{'_'.join(names)}"[:90]
                (out / f"{name}.py").write_text(code)
                row["file"] = f"{name}.py"
        rows.append(row)
        with open(out / "synth.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if on_task is not None:
            on_task(row)
    return rows
