"""The chat driver: steps an episode with a chat policy (an OpenAI-compatible server), for `optimize` and `bench`.

    notices ─ context (old observations elided to fit) ─ await policy.reply ─ await episode.act ─ recorders

Only the copy of the history sent to the model is elided; the episode's history and the trajectory keep every
message whole. When the server says the history no longer fits, the elision budget shrinks and the turn is asked
again; when nothing is left to elide, the episode ends with reason `context`.
"""

from __future__ import annotations

import asyncio

from cudagent.agent.context import elide, estimate_tokens
from cudagent.agent.episode import Episode, EpisodeResult
from cudagent.agent.policy import ContextOverflow, Policy, PolicyError
from cudagent.agent.recorders import Recorders
from cudagent.agent.tools import openai_tools

DEFAULT_CONTEXT_TOKENS = 32768
REPLY_RESERVE_TOKENS = 4096


class ChatDriver:
    def __init__(self, episode: Episode, policy: Policy, recorders: Recorders, final_evaluation: bool = True):
        self.episode, self.policy, self.recorders = episode, policy, recorders
        self.final_evaluation = final_evaluation
        self.tools = openai_tools()
        self.interrupted: EpisodeResult | None = None  # the result recorded when a signal stopped the episode
        self.interrupt_reason = "interrupted"  # or "terminated" (SIGTERM), set by whoever cancels

    async def run(self) -> EpisodeResult:
        """Step the episode until it stops; on cancellation (Ctrl-C), finish it as `interrupted` and re-raise."""
        ep = self.episode
        reason = error = None
        try:
            while reason is None:
                reason = ep.stop_reason()
                if reason is not None:
                    break
                for why in ep.notices():
                    self.recorders.notice(why, ep.state.turn)
                self.recorders.started(ep.state.turn + 1, "the model")
                try:
                    reply = await self.policy.reply(self._context(ep.messages + ep.pending), self.tools)
                except ContextOverflow as exc:
                    if not self._shrink():
                        reason, error = "context", exc.message
                    continue
                except PolicyError as exc:
                    reason, error = "policy_error", exc.message
                    break
                turn = await ep.act(reply)
                ep.recorded(self.recorders.turn(turn, ep.state))
        except (asyncio.CancelledError, KeyboardInterrupt):
            self.interrupted = await ep.finish(self.interrupt_reason, None, final_evaluation=False)
            raise
        return await ep.finish(reason, error, self.final_evaluation)

    # ----- the context window -----------------------------------------------------------------------------------

    def _budget(self) -> int:
        state = self.episode.state
        if not state.context_budget:
            window = self.episode.limits.context_tokens or self.policy.context_tokens or DEFAULT_CONTEXT_TOKENS
            reserve = self.policy.max_tokens or REPLY_RESERVE_TOKENS
            state.context_budget = max(1024, int(window * 0.9) - reserve)
        return state.context_budget

    def _shrink(self) -> bool:
        """The server said the history is too long: elide harder, if anything is left to elide."""
        floor = estimate_tokens(self.episode.messages[:2]) + 256
        budget = self._budget()
        if budget <= floor:
            return False
        self.episode.state.context_budget = max(floor, int(budget * 0.7))
        return True

    def _context(self, messages: list[dict]) -> list[dict]:
        return elide(messages, self._budget())
