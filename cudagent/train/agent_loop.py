"""The verl adapter: one AgentLoopBase subclass that runs a cudagent episode inside verl's rollout.

Registered through `agent_loops.yaml` (given at `actor_rollout_ref.rollout.agent.agent_loop_config_path`; rollout
workers are Ray actors in other processes, so a decorator in this process would not reach them) under the name the
exported rows carry in `agent_name` (`cudagent_agent`). verl calls `run(sampling_params, **row)`; the episode is
stepped by the token driver over verl's own server client, evaluated on the `cudagent serve` hosts named in the
stage config's `cudagent.evaluator_urls` (token: CUDAGENT_EVALUATOR_TOKEN), and returned as verl's AgentLoopOutput
with `reward_score` set, so verl's reward manager is skipped and puts the tier on the last response token (the
model's: the ledger is trimmed).

This and verl_config.py (verl's own config check) are the only modules of cudagent that import verl.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from cudagent.errors import CudagentError
from cudagent.resultlog import append_row
from cudagent.train.rollout import RolloutSettings, rollout

AGENT_NAME = "cudagent_agent"


class VerlServerBackend:
    """verl's LLMServerClient as a cudagent token backend: the same call; its log-probabilities are required."""

    def __init__(self, server_manager, metrics: AgentLoopMetrics):
        self.server_manager, self.metrics = server_manager, metrics

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict):
        started = time.monotonic()
        # verl's vLLM and SGLang servers return log-probabilities only when the request asks for them
        asked = {**sampling_params, "logprobs": True}
        out = await self.server_manager.generate(request_id, prompt_ids=prompt_ids, sampling_params=asked)
        self.metrics.generate_sequences += time.monotonic() - started
        if out.log_probs is None:
            raise CudagentError(
                "the rollout server returned no log-probabilities; set actor_rollout_ref.rollout.calculate_log_probs="
                "true (training must see the sampling distribution of every token)"
            )
        return out


class CudagentAgentLoop(AgentLoopBase):
    _pools: dict[tuple, Any] = {}  # one evaluator pool per worker process and URL list (sessions are balanced)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        section = dict(self.config.get("cudagent") or {})
        urls = section.pop("evaluator_urls", None)
        if not urls:
            raise CudagentError("the stage config names no evaluator: set cudagent.evaluator_urls (serve URLs)")
        settings = RolloutSettings.from_config(
            {
                "prompt_tokens": self.rollout_config.prompt_length,
                "response_tokens": self.rollout_config.response_length,
                **section,
            }
        )
        metrics = AgentLoopMetrics()
        backend = VerlServerBackend(self.server_manager, metrics)
        sampling = {k: v for k, v in sampling_params.items() if k != "logprobs"}  # the backend always asks for them
        started = time.monotonic()
        result = await rollout(
            _plain(kwargs.get("extra_info")), backend, self.tokenizer, settings, self._pool(urls), sampling
        )
        metrics.tool_calls = max(0.0, time.monotonic() - started - metrics.generate_sequences)
        record_episode({"t": time.time(), "task": result.task, "reward": result.reward, **result.metrics})
        ledger = result.ledger
        return AgentLoopOutput(
            prompt_ids=ledger.prompt_ids,
            response_ids=ledger.response_ids,
            response_mask=ledger.response_mask,
            response_logprobs=ledger.response_logprobs,
            reward_score=result.reward,
            num_turns=result.num_turns,
            metrics=metrics,
            # reward_extra_info: verl puts these beside the reward in the batch and its metrics
            extra_fields={"reward_extra_info": {**result.metrics, "reward": result.reward}},
        )

    @classmethod
    def _pool(cls, urls):
        from cudagent.evaluator.where import evaluators

        key = tuple(urls) if not isinstance(urls, str) else (urls,)
        if key not in cls._pools:
            cls._pools[key] = evaluators(list(key))
        return cls._pools[key]


def record_episode(row: dict) -> None:
    """One line in the run's rollouts.jsonl (CUDAGENT_TRAIN_ROLLOUTS, set by `cudagent train`), which `cudagent train
    status` and the stop rule read; nothing when unset."""
    path = os.environ.get("CUDAGENT_TRAIN_ROLLOUTS")
    if path:
        append_row(Path(path), row)


def _plain(value) -> dict:
    """A row field as verl hands it (a dict, an OmegaConf node or a numpy object) as a plain dict."""
    if value is None:
        return {}
    if hasattr(value, "item") and not isinstance(value, dict):
        value = value.item()
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:
        pass
    return dict(value)
