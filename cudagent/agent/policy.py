"""What the chat driver needs from a policy, and nothing more.

Each turn the chat driver (chat_driver.py) asks the policy for the next reply to the history (old observations
elided when the context window fills) and the tool schemas. `OpenAIChatPolicy` (openai_policy.py) talks to any
OpenAI-compatible server and returns text and tool calls. Training does not go through this interface: the token
driver (token_driver.py) owns the exact token ids a model sampled and never re-tokenizes text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict | None  # None when the arguments were not a JSON object
    raw_arguments: str = ""
    error: str | None = None  # why the call cannot be run as given (bad JSON, unknown tool)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens


@dataclass
class PolicyReply:
    content: str
    tool_calls: list[ToolCall]
    usage: Usage
    message: dict  # the assistant message to append to the history, exactly as the server should see it again
    seconds: float = 0.0
    finish_reason: str | None = None
    format_error: str | None = None  # the reply held no usable action, and why
    token_ids: list[int] | None = None  # token-level policies only: the sampled ids
    logprobs: list[float] | None = None  # and their log-probabilities
    attempts: int = 1
    cost_usd: float | None = None  # what the reply cost, where the policy knows prices
    extra: dict = field(default_factory=dict)


class PolicyError(Exception):
    """The policy cannot answer: retries are exhausted, or the server refused in a way retrying cannot fix."""

    def __init__(self, message: str, retryable: bool = False):
        super().__init__(message)
        self.message = message
        self.retryable = retryable


class ContextOverflow(PolicyError):
    """The history no longer fits the model's context window."""


@runtime_checkable
class Policy(Protocol):
    model: str
    action_format: str  # "tools" (native tool calls) or "text" (fenced action blocks, see actions.py)
    context_tokens: int | None  # the model's context window, when the server said; None: unknown
    max_tokens: int | None  # most tokens of one reply, when limited; elision keeps this much room for it

    def prepare(self) -> None:
        """Resolve the model and learn what the server supports, before the first reply (blocking)."""

    async def reply(self, messages: list[dict], tools: list[dict]) -> PolicyReply:
        """The next assistant reply to `messages`; raise PolicyError when none can be had."""

    def describe(self) -> dict:
        """What to record about this policy in the trajectory (model, endpoint, action format...)."""
