"""One training episode, without verl: a dataset row's task, a fresh workspace, the remote evaluator, the token
driver over whatever token backend the trainer gives (verl's server client has the shape of ours), and what the
trainer consumes: the ledger, the reward and the metrics.

    rollout(row's extra_info, backend, tokenizer, settings, pool) -> Rollout(ledger, reward, tier, metrics)

Stages: `agentic` (and RFT collection) run the whole episode, up to `max_turns`, each reply capped at `reply_tokens`;
`warmup` is single-turn (single_turn.py): its own prompt asks for one whole model_new.py, the one reply may use the
whole response length, and that file's tier is the reward. The response never exceeds `response_tokens` (the
trainer's padded length): the driver's context is the prompt plus that.
"""

from __future__ import annotations

import math
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.agent.environment import open_episode
from cudagent.agent.episode import END_REASONS, EpisodeLimits
from cudagent.agent.ledger import Ledger
from cudagent.agent.recorders import Recorders
from cudagent.agent.renderer import ChatRenderer
from cudagent.agent.token_driver import TokenDriver
from cudagent.errors import CudagentError
from cudagent.train.reward import reward_of
from cudagent.train.single_turn import single_turn, single_turn_opening


class RowError(CudagentError):
    """A dataset row that does not describe a task."""


@dataclass
class RolloutSettings:
    single_turn: bool = False  # the warm-up stage: one reply, as long as the response length allows
    max_turns: int = 150
    reply_tokens: int = 4096  # one reply's cap in a multi-turn episode (verl 0.9.1 has no per-turn cap of its own)
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
        if settings.single_turn:
            return await _single_turn(task, evaluator, backend, tokenizer, settings, sampling, started)
        with tempfile.TemporaryDirectory(prefix="cudagent-rollout-") as tmp:
            return await _episode(task, evaluator, Path(tmp), backend, tokenizer, settings, sampling, started)
    finally:
        await evaluator.close()


def _opening_ids(task, renderer: ChatRenderer, messages: list[dict], settings: RolloutSettings) -> list[int]:
    opening = renderer.opening_ids(messages)
    if len(opening) > settings.prompt_tokens:
        raise RowError(
            f"task {task.name}: its opening is {len(opening)} tokens, over the trainer's prompt length "
            f"{settings.prompt_tokens}; raise data.max_prompt_length or drop the task"
        )
    return opening


async def _episode(task, evaluator, tmp: Path, backend, tokenizer, settings, sampling, started) -> Rollout:
    from cudagent.workspace import Workspace

    ws = Workspace.create(tmp / "workspace", task.source)
    episode = open_episode(task, ws, evaluator, EpisodeLimits(max_turns=settings.max_turns), "text")
    renderer = ChatRenderer(tokenizer)
    opening = _opening_ids(task, renderer, episode.messages, settings)
    driver = TokenDriver(
        episode,
        backend,
        renderer,
        Recorders(),
        context_tokens=len(opening) + settings.response_tokens,
        reply_tokens=settings.reply_tokens,
        sampling=sampling,
        request_id=uuid.uuid4().hex,
        ledger=Ledger(opening),
    )
    result = await driver.run()
    if result.end_reason == "policy_error":  # the server's failure, not the policy's: no reward, the step fails
        raise CudagentError(f"the model server failed during the episode: {result.error}")
    tier = result.tier if result.best else None
    m, best = result.metrics(), result.best_summary() or {}
    counts = {k: m[k] for k in ("turns", "valid_calls", "invalid_calls")}
    return Rollout(
        task=task.name,
        ledger=driver.ledger,
        reward=reward_of(tier, result.end_reason),
        tier=tier,
        end_reason=result.end_reason,
        num_turns=len(result.messages) - 2,
        metrics={
            **_metrics(tier, result.end_reason, time.monotonic() - started, best.get("speedup_vs_compile"), **counts),
            "tool_validity": round(m["tool_validity"], 4),
            "final_evaluation_failed": int(result.final_error is not None),
            **_sampling(driver.ledger),
        },
    )


async def _single_turn(task, evaluator, backend, tokenizer, settings, sampling, started) -> Rollout:
    renderer = ChatRenderer(tokenizer)
    opening = _opening_ids(task, renderer, single_turn_opening(task, evaluator), settings)
    shot = await single_turn(task, evaluator, backend, renderer, opening, settings.response_tokens, sampling)
    found = int(shot.end_reason == "finished")
    return Rollout(
        task=task.name,
        ledger=shot.ledger,
        reward=reward_of(shot.tier, shot.end_reason),
        tier=shot.tier,
        end_reason=shot.end_reason,
        num_turns=1,
        metrics={
            **_metrics(
                shot.tier,
                shot.end_reason,
                time.monotonic() - started,
                shot.speedup_vs_compile,
                turns=1,
                valid_calls=found,
                invalid_calls=1 - found,
            ),  # fmt: skip
            "tool_validity": float(found),
            "final_evaluation_failed": 0,
            **_sampling(shot.ledger),
        },
    )


def _sampling(ledger: Ledger) -> dict:
    """The smallest probability the server gave a token it sampled (a BF16 monitor) and the token counts."""
    sampled = [lp for lp, m in zip(ledger.response_logprobs, ledger.response_mask) if m]
    return {
        "min_token_prob": math.exp(min(sampled)) if sampled else 1.0,
        "sampled_tokens": len(sampled),
        "response_tokens": len(ledger.response_ids),
    }


def _metrics(tier, end_reason: str, seconds: float, speedup, *, turns: int, valid_calls: int, invalid_calls: int):
    """What both kinds of episode report, with the same keys (verl stacks each key over the batch)."""
    return {
        "tier": -1 if tier is None else tier,
        "correct": int(tier is not None and tier >= 1),
        "end_reason": end_reason,
        "turns": turns,
        "valid_calls": valid_calls,
        "invalid_calls": invalid_calls,
        "faster_than_compile": int(tier == 3),
        "speedup_vs_compile": speedup or 0.0,
        "episode_seconds": round(seconds, 2),
        # numeric, so verl's validation metrics average them (strings it skips); every reason in every row, since
        # verl stacks each key over the batch and a batch mixes episodes that ended differently
        **{f"ended_{reason}": int(end_reason == reason) for reason in END_REASONS},
    }
