"""The token driver: steps an episode with a token backend, keeping the exact ids the model saw and sampled.

    notices ─ new messages rendered as a delta and appended (masked) ─ await backend.generate(ledger ids) ─
    ids appended (unmasked) ─ text decoded, tool calls parsed ─ await episode.act ─ recorders

The history is append-only: the messages already turned into tokens must stay exactly as they were (the driver
checks, each turn, that no earlier message was replaced or changed, and raises HistoryEdited otherwise; it never
re-renders). Each turn's max_tokens is capped by what is left of the context; when too little is left the episode
ends with reason `context`. At the end, trailing loop-added tokens are trimmed so the last token is the model's.
Tool calls are parsed from the sampled text with the text action parser (actions.py), so the prompts use the text
action format.
"""

from __future__ import annotations

import asyncio
import uuid

from cudagent.agent.actions import parse_text_action
from cudagent.agent.backends import BackendError, TokenBackend
from cudagent.agent.episode import Episode, EpisodeResult
from cudagent.agent.ledger import Ledger
from cudagent.agent.policy import PolicyReply, Usage
from cudagent.agent.recorders import Recorders
from cudagent.agent.renderer import ChatRenderer
from cudagent.agent.tools import TOOL_NAMES

MIN_REPLY_TOKENS = 16


class HistoryEdited(RuntimeError):
    """A message already turned into tokens was replaced or changed."""


class TokenDriver:
    def __init__(
        self,
        episode: Episode,
        backend: TokenBackend,
        renderer: ChatRenderer,
        recorders: Recorders,
        *,
        context_tokens: int,
        reply_tokens: int = 4096,
        sampling: dict | None = None,
        request_id: str | None = None,
        final_evaluation: bool = True,
        ledger: Ledger | None = None,
        rendered: int | None = None,
        model_stopped: bool = True,
    ):
        """`ledger`, `rendered` (how many of the episode's messages the ledger holds) and `model_stopped` resume."""
        self.episode, self.backend, self.renderer, self.recorders = episode, backend, renderer, recorders
        self.context_tokens, self.reply_tokens = context_tokens, reply_tokens
        self.sampling = dict(sampling or {})
        self.request_id = request_id or uuid.uuid4().hex
        self.final_evaluation = final_evaluation
        self.ledger = ledger if ledger is not None else Ledger(renderer.opening_ids(episode.messages))
        self._frozen: list[tuple[dict, object]] = []  # (message, its content) for every rendered message
        self._freeze(episode.messages[: len(episode.messages) if rendered is None else rendered])
        self._model_stopped = model_stopped
        self.interrupted: EpisodeResult | None = None
        self.interrupt_reason = "interrupted"  # or "terminated" (SIGTERM), set by whoever cancels

    async def run(self) -> EpisodeResult:
        """Step the episode to its end; the ledger (trimmed) is `self.ledger`."""
        ep = self.episode
        reason = error = None
        try:
            while reason is None:
                reason = ep.stop_reason()
                if reason is not None:
                    break
                for why in ep.notices():
                    self.recorders.notice(why, ep.state.turn)
                reason = await self._turn()
        except BackendError as exc:
            reason, error = "policy_error", str(exc)
        except (asyncio.CancelledError, KeyboardInterrupt):
            self.interrupted = await ep.finish(self.interrupt_reason, None, final_evaluation=False)
            self.ledger.trim()
            raise
        result = await ep.finish(reason, error, self.final_evaluation)
        self.ledger.trim()
        return result

    async def _turn(self) -> str | None:
        ep = self.episode
        self._check_history()
        new = ep.messages[len(self._frozen) :] + ep.pending
        observation_ids = self.renderer.delta_ids(new, self._model_stopped) if new else []
        self.ledger.add_observation(observation_ids)
        room = self.context_tokens - len(self.ledger)
        if room < MIN_REPLY_TOKENS:
            return "context"
        prompt_tokens = len(self.ledger)
        out = await self.backend.generate(
            self.request_id,
            prompt_ids=self.ledger.all_ids(),
            sampling_params={**self.sampling, "max_tokens": min(self.reply_tokens, room)},
        )
        ids, logprobs = list(out.token_ids), list(out.log_probs)
        self.ledger.add_model(ids, logprobs)
        self._model_stopped = bool(ids) and ids[-1] in self.renderer.stop_ids
        text = self.renderer.decode(ids)
        calls, format_error = parse_text_action(text, TOOL_NAMES)
        reply = PolicyReply(
            content=text,
            tool_calls=calls,
            usage=Usage(prompt_tokens, len(ids)),
            message={"role": "assistant", "content": text},
            finish_reason=out.stop_reason,
            format_error=format_error,
            token_ids=ids,
            logprobs=logprobs,
        )
        turn = await ep.act(reply)
        turn.reply["observation_ids"] = observation_ids  # the trajectory then holds the whole ledger
        if turn.number == 1:
            turn.reply["prompt_ids"] = self.ledger.prompt_ids
        # the reply is in the ledger as sampled; the observations after it are rendered next turn
        self._freeze(ep.messages[len(self._frozen) : len(ep.messages) - len(turn.observations)])
        ep.recorded(self.recorders.turn(turn, ep.state))
        return None

    def _freeze(self, messages: list[dict]) -> None:
        self._frozen.extend((m, m.get("content")) for m in messages)

    def _check_history(self) -> None:
        messages = self.episode.messages
        if len(messages) < len(self._frozen):
            raise HistoryEdited("messages already turned into tokens were removed from the history")
        for i, (m, content) in enumerate(self._frozen):
            if messages[i] is not m or m.get("content") is not content:
                raise HistoryEdited(
                    f"message {i} of the history changed after it was turned into tokens; the token stream is "
                    "append-only (re-rendering would train on ids the model never saw)"
                )
