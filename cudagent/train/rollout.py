"""One training episode, without verl: a dataset row's task, a fresh workspace, the remote evaluator, the token
driver over whatever token backend the trainer gives (verl's server client has the shape of ours), and what the
trainer consumes: the ledger, the reward and the metrics.

    rollout(row's extra_info, backend, tokenizer, settings, pool) -> Rollout(ledger, reward, tier, metrics)

Stages: `agentic` (and RFT collection) run the whole episode, up to `max_turns`; `warmup` is single-turn: one reply,
no observation after it, and the workspace as that reply left it is evaluated once with timing (its tier is the
reward). The response never exceeds `response_tokens` (the trainer's padded length): the driver's context is the
prompt plus that.
"""

from __future__ import annotations

import math
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.agent.environment import open_episode
from cudagent.agent.episode import END_REASONS, EpisodeLimits, EpisodeResult
from cudagent.agent.ledger import Ledger
from cudagent.agent.recorders import Recorders
from cudagent.agent.renderer import ChatRenderer
from cudagent.agent.token_driver import TokenDriver
from cudagent.errors import CudagentError
from cudagent.evaluator.port import snapshot_of
from cudagent.train.reward import reward_of


class RowError(CudagentError):
    """A dataset row that does not describe a task."""


@dataclass
class RolloutSettings:
    single_turn: bool = False  # the warm-up stage
    max_turns: int = 150
    reply_tokens: int = 4096  # one reply's cap (verl 0.9.1 has no per-turn cap of its own)
    prompt_tokens: int = 8192  # the trainer's padded prompt length: an opening longer than this is refused
    response_tokens: int = 32768  # the trainer's padded response length: the whole rest of the episode

    @classmethod
    def from_config(cls, section) -> RolloutSettings:
        """From the `cudagent:` section of a stage config (a mapping; unknown keys refused)."""
        values = dict(section or {})
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise CudagentError(f"unknown cudagent settings {', '.join(unknown)} in the stage config")
        return cls(**values)


@dataclass
class Rollout:
    task: str
    ledger: Ledger
    reward: float
    tier: int | None
    end_reason: str
    num_turns: int  # messages of the conversation after the opening pair: replies and observations
    metrics: dict = field(default_factory=dict)


def task_of(extra_info: dict):
    """The task a row names: `extra_info` as `cudagent data export --format verl` writes it."""
    from cudagent.task import Task

    info = dict(extra_info or {})
    source, name = info.get("task_source"), info.get("task_id")
    if not isinstance(source, str) or not source.strip():
        raise RowError(f"the row's extra_info has no task source (keys: {', '.join(sorted(info)) or 'none'})")
    return Task(str(name or "task"), source)


async def rollout(extra_info: dict, backend, tokenizer, settings: RolloutSettings, pool, sampling: dict) -> Rollout:
    """Run one episode of the row's task and score it."""
    task = task_of(extra_info)
    evaluator = pool.port(task)
    started = time.monotonic()
    await evaluator.open()
    try:
        with tempfile.TemporaryDirectory(prefix="cudagent-rollout-") as tmp:
            return await _episode(task, evaluator, Path(tmp), backend, tokenizer, settings, sampling, started)
    finally:
        await evaluator.close()


async def _episode(task, evaluator, tmp: Path, backend, tokenizer, settings, sampling, started) -> Rollout:
    from cudagent.workspace import Workspace

    ws = Workspace.create(tmp / "workspace", task.source)
    limits = EpisodeLimits(max_turns=1 if settings.single_turn else settings.max_turns)
    episode = open_episode(task, ws, evaluator, limits, "text")
    renderer = ChatRenderer(tokenizer)
    opening = renderer.opening_ids(episode.messages)
    if len(opening) > settings.prompt_tokens:
        raise RowError(
            f"task {task.name}: its opening is {len(opening)} tokens, over the trainer's prompt length "
            f"{settings.prompt_tokens}; raise data.max_prompt_length or drop the task"
        )
    driver = TokenDriver(
        episode,
        backend,
        renderer,
        Recorders(),
        context_tokens=len(opening) + settings.response_tokens,
        reply_tokens=settings.reply_tokens,
        sampling=sampling,
        request_id=uuid.uuid4().hex,
        final_evaluation=not settings.single_turn,
        ledger=Ledger(opening),
    )
    result = await driver.run()
    if result.end_reason == "policy_error":  # the server's failure, not the policy's: no reward, the step fails
        raise CudagentError(f"the model server failed during the episode: {result.error}")
    tier, judged = (result.tier if result.best else None), {}
    if settings.single_turn:  # warm-up: the workspace as the one reply left it (a load_inline model_new.py is whole)
        verdict = await evaluator.evaluate(snapshot_of(ws), timing=True, fresh=True)
        tier, judged = verdict.tier, {"correct": int(verdict.correct)}
    return Rollout(
        task=task.name,
        ledger=driver.ledger,
        reward=reward_of(tier, result.end_reason),
        tier=tier,
        end_reason=result.end_reason,
        num_turns=len(result.messages) - 2,
        metrics={**_metrics(result, tier, judged, time.monotonic() - started), **_sampling(driver.ledger)},
    )


def _sampling(ledger: Ledger) -> dict:
    """The smallest probability the server gave a token it sampled (a BF16 monitor) and the token counts."""
    sampled = [lp for lp, m in zip(ledger.response_logprobs, ledger.response_mask) if m]
    return {
        "min_token_prob": math.exp(min(sampled)) if sampled else 1.0,
        "sampled_tokens": len(sampled),
        "response_tokens": len(ledger.response_ids),
    }


def _metrics(result: EpisodeResult, tier: int | None, judged: dict, seconds: float) -> dict:
    m = result.metrics()
    best = result.best_summary() or {}
    return {
        "tier": -1 if tier is None else tier,
        "end_reason": result.end_reason,
        "turns": m["turns"],
        "tool_validity": round(m["tool_validity"], 4),
        "valid_calls": m["valid_calls"],
        "invalid_calls": m["invalid_calls"],
        "faster_than_compile": int(tier == 3),
        "speedup_vs_compile": best.get("speedup_vs_compile") or 0.0,
        "final_evaluation_failed": int(result.final_error is not None),
        "episode_seconds": round(seconds, 2),
        # numeric, so verl's validation metrics average them (strings it skips); every reason in every row, since
        # verl stacks each key over the batch and a batch mixes episodes that ended differently
        **{f"ended_{reason}": int(result.end_reason == reason) for reason in END_REASONS},
        **judged,
    }
