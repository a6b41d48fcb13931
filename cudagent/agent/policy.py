"""What the loop needs from a policy, and nothing more.

The loop keeps one linear history of chat messages and, each turn, asks the policy for the next reply given that
history and the tool schemas. Two kinds of policy fit this interface:

- `OpenAIChatPolicy` (openai_policy.py) talks to any OpenAI-compatible server. It returns text and tool calls.
- A token-level policy for training (verl's agent loop, REFERENCE.md §6) renders the same messages with the
  model's chat template, samples with its own engine and fills `PolicyReply.token_ids` and `logprobs` with the
  exact sampled ids and their log-probabilities. The loop stores them in the trajectory untouched, never
  re-tokenizes a reply, and marks every message it adds itself (observations, format errors, limit notices) as
  `role` "tool" or "user": those tokens are the ones a trainer masks out. `Policy.tokenizes` tells the loop which
  kind it holds, so it can refuse history edits (elision) that would make the token stream differ from what the
  policy saw: a token-level policy gets its context limit enforced by ending the episode instead.
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
    tokenizes: bool  # True for token-level policies (see the module docstring)

    def prepare(self) -> None:
        """Resolve the model and learn what the server supports, before the first reply."""

    def reply(self, messages: list[dict], tools: list[dict]) -> PolicyReply:
        """The next assistant reply to `messages`; raise PolicyError when none can be had."""

    def describe(self) -> dict:
        """What to record about this policy in the trajectory (model, endpoint, action format...)."""
