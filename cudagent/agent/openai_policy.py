"""A policy behind any OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp, hosted APIs).

Action formats, probed once before the first turn and downgraded if the server later refuses:
    auto      native tool calls, tool_choice="auto"
    required  native tool calls, tool_choice="required" (vLLM without a tool-call parser accepts this, not auto)
    text      no tools in the request; the model writes a fenced action block (actions.py)
A reply without native calls is still searched for a written action, since small models often write one.

Retries are ours (the client's are off): 429, 5xx, timeouts, dropped connections and unparseable answers are
retried with exponential backoff and jitter, honouring Retry-After; authentication, permission and context-length
errors are not, since retrying cannot fix them. `prepare` is synchronous (it runs once, before an episode);
`reply` is a coroutine on the client's async twin, so many episodes share one event loop and a cancelled episode
drops its request at once.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import random
import time

from cudagent.agent.actions import native_call, parse_text_action
from cudagent.agent.policy import ContextOverflow, PolicyError, PolicyReply, ToolCall, Usage
from cudagent.errors import CudagentError, EnvironmentProblem

MODES = ("auto", "required", "text")
_CONTEXT_HINTS = (
    "context length",
    "context_length",
    "maximum context",
    "context window",
    "too many tokens",
    "prompt is too long",
    "exceeds the available context",
    "n_ctx",
)
_TOOL_HINTS = ("tool", "function")


class OpenAIChatPolicy:
    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        timeout_s: float = 600.0,
        max_attempts: int = 6,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        mode: str | None = None,
        prices_per_mtok: tuple[float, float] | None = None,
        sleep=None,
        on_retry=None,
    ):
        import openai

        self.base_url = server_address(base_url)
        self.on_retry = on_retry  # told, in one line, of every retry as it happens
        self._preparing = False
        key = api_key or os.environ.get("OPENAI_API_KEY") or "none"  # local servers take any key
        self._client = openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=timeout_s)
        self._async_client = openai.AsyncOpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=timeout_s)
        self._openai = openai
        self.model = model or ""
        self.mode = mode or "auto"
        if self.mode not in MODES:
            raise ValueError(f"unknown action format {self.mode!r}; use one of {', '.join(MODES)}")
        self._probe = mode is None
        self.max_attempts, self.backoff_s, self.max_backoff_s = max_attempts, backoff_s, max_backoff_s
        self.temperature, self.max_tokens = temperature, max_tokens
        self.prices = prices_per_mtok
        self.context_tokens: int | None = None  # learned from the server when it says
        self._sleep = sleep or _sleep  # replies sleep without blocking the event loop; prepare blocks
        self.events: list[str] = []  # what the policy learned or changed (mode downgrades), for the trajectory

    @property
    def action_format(self) -> str:
        return "text" if self.mode == "text" else "tools"

    # ----- setup ----------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Resolve the model and probe the server. Nothing listening at the address fails at once (no retries)."""
        self._preparing = True
        try:
            self._prepare()
        finally:
            self._preparing = False

    def _prepare(self) -> None:
        if not self.model:
            models = self._retrying(lambda: self._client.models.list(), "listing the server's models")
            data = list(getattr(models, "data", None) or [])
            if not data:
                raise PolicyError(f"the server at {self.base_url} lists no models; pass --model")
            self.model = data[0].id
            extra = getattr(data[0], "model_extra", None) or {}
            for key in ("max_model_len", "context_length", "n_ctx"):
                if isinstance(extra.get(key), int):
                    self.context_tokens = extra[key]
                    break
        if self._probe:
            self._probe_mode()

    def _probe_mode(self) -> None:
        """One token with a tool offered: learn which tool_choice the server accepts."""
        tool = {
            "type": "function",
            "function": {
                "name": "noop",
                "description": "does nothing",
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for mode in ("auto", "required"):
            try:
                self._retrying(
                    lambda m=mode: self._client.chat.completions.create(
                        model=self.model,
                        messages=[{"role": "user", "content": "Reply with anything."}],
                        tools=[tool],
                        tool_choice=m,
                        max_tokens=1,
                    ),
                    "probing tool-call support",
                )
                self.mode = mode
                return
            except PolicyError as exc:
                if exc.retryable or not _mentions(exc.message, _TOOL_HINTS):
                    raise
                self.events.append(f"tool_choice={mode} refused: {exc.message[:200]}")
        self.mode = "text"
        self.events.append("the server has no tool calls: using the text action format")

    def describe(self) -> dict:
        return {
            "kind": "openai-chat",
            "model": self.model,
            "base_url": self.base_url,
            "mode": self.mode,
            "context_tokens": self.context_tokens,
            "events": list(self.events),
        }

    # ----- replies --------------------------------------------------------------------------------------------

    async def reply(self, messages: list[dict], tools: list[dict]) -> PolicyReply:
        names = {t["function"]["name"] for t in tools}
        while True:
            kwargs: dict = {"model": self.model, "messages": _for_mode(messages, self.mode)}
            if self.mode != "text":
                kwargs["tools"] = tools
                kwargs["tool_choice"] = self.mode
            if self.temperature is not None:
                kwargs["temperature"] = self.temperature
            if self.max_tokens is not None:
                kwargs["max_tokens"] = self.max_tokens
            start = time.monotonic()
            try:
                response, attempts = await self._retrying_async(
                    lambda kw=kwargs: self._async_client.chat.completions.create(**kw), "asking the model"
                )
            except PolicyError as exc:
                if (
                    self.mode != "text"
                    and not exc.retryable
                    and _mentions(exc.message, _TOOL_HINTS)
                    and not isinstance(exc, ContextOverflow)
                ):
                    self._downgrade(exc.message)
                    continue
                raise
            return self._parse(response, names, time.monotonic() - start, attempts)

    def _downgrade(self, why: str) -> None:
        new = "required" if self.mode == "auto" else "text"
        self.events.append(f"tool_choice={self.mode} refused ({why[:200]}); now {new}")
        self.mode = new

    def _parse(self, response, names: set[str], seconds: float, attempts: int) -> PolicyReply:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise PolicyError("the server answered with no choices", retryable=False)
        choice = choices[0]
        msg = choice.message
        content = msg.content or ""
        calls: list[ToolCall] = []
        for tc in msg.tool_calls or []:
            fn = getattr(tc, "function", None)
            calls.append(native_call(tc.id, getattr(fn, "name", ""), getattr(fn, "arguments", ""), names))
        format_error = None
        native = bool(calls)
        if not calls:
            calls, format_error = parse_text_action(content, names)
            if not calls and self.mode != "text" and format_error and format_error.startswith("no action found"):
                # tools were offered natively: the fix is to call one, not to write a text block
                format_error = "the reply called no tool: call one of the tools offered (or end with finish)"
        usage = Usage()
        if response.usage is not None:
            usage = Usage(response.usage.prompt_tokens or 0, response.usage.completion_tokens or 0)
        message: dict = {"role": "assistant", "content": content}
        if native:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
                for c in calls
            ]
        return PolicyReply(
            content=content,
            tool_calls=calls,
            usage=usage,
            message=message,
            seconds=seconds,
            finish_reason=choice.finish_reason,
            format_error=format_error,
            attempts=attempts,
            cost_usd=self.cost_usd(usage),
            extra={"native": native},
        )

    def cost_usd(self, usage: Usage) -> float | None:
        """Dollars for `usage`, only when prices were given (local models have none)."""
        if not self.prices:
            return None
        return (usage.prompt_tokens * self.prices[0] + usage.completion_tokens * self.prices[1]) / 1e6

    # ----- retries --------------------------------------------------------------------------------------------

    def _retrying(self, fn, what: str):
        return self._retrying_counted(fn, what)[0]

    def _retrying_counted(self, fn, what: str):
        err = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn(), attempt
            except Exception as exc:  # classified below; anything unknown is not retried
                err = self._classify(exc, what)
                if not err.retryable or attempt == self.max_attempts:
                    raise err from exc
                delay = self._delay(attempt, exc)
                self._tell_retry(err, delay, attempt)
                pause = self._sleep(delay)
                if inspect.isawaitable(pause):  # a blocking call made from inside an event loop: do not wait
                    pause.close()
        raise err  # pragma: no cover  (the loop always returns or raises)

    async def _retrying_async(self, make, what: str):
        """(result, attempts) of `await make()`, retried as `_retrying_counted` retries."""
        err = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                return await make(), attempt
            except Exception as exc:  # classified below; anything unknown is not retried
                err = self._classify(exc, what)
                if not err.retryable or attempt == self.max_attempts:
                    raise err from exc
                delay = self._delay(attempt, exc)
                self._tell_retry(err, delay, attempt)
                pause = self._sleep(delay)
                if inspect.isawaitable(pause):
                    await pause
        raise err  # pragma: no cover  (the loop always returns or raises)

    def _tell_retry(self, err: PolicyError, delay: float, attempt: int) -> None:
        if self.on_retry is not None:
            self.on_retry(f"{err.message}; retrying in {delay:.1f} s (attempt {attempt + 1} of {self.max_attempts})")

    def _delay(self, attempt: int, exc: Exception) -> float:
        response = getattr(exc, "response", None)
        retry_after = None
        if response is not None:
            try:
                retry_after = float(response.headers.get("retry-after"))
            except (TypeError, ValueError):
                retry_after = None
        base = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
        delay = base * (0.5 + random.random() / 2)
        return min(self.max_backoff_s, max(delay, retry_after or 0.0))

    def _classify(self, exc: Exception, what: str) -> PolicyError:
        o = self._openai
        where = f"{what} at {self.base_url}"
        if isinstance(exc, (o.AuthenticationError, o.PermissionDeniedError)):
            return PolicyError(
                f"the server refused the credentials while {where}: check OPENAI_API_KEY ({_status_text(exc)})"
            )
        if isinstance(exc, o.NotFoundError):
            return PolicyError(f"not found while {where} ({_status_text(exc)}): check --base-url and --model")
        if isinstance(exc, o.APIStatusError):
            text = _status_text(exc)
            if exc.status_code in (400, 413, 422) and _mentions(text, _CONTEXT_HINTS):
                return ContextOverflow(f"the conversation no longer fits the model's context ({text})")
            if exc.status_code == 429 or exc.status_code >= 500 or exc.status_code == 408:
                return PolicyError(f"the server answered {exc.status_code} while {where}", retryable=True)
            return PolicyError(f"the server answered {exc.status_code} while {where}: {text}")
        if isinstance(exc, o.APIConnectionError) and _refused(exc):
            # nothing listens there: at start that is a wrong address or a server not started, so say it at once;
            # in the middle of a run it may be a server restarting, so retry then
            return PolicyError(
                f"nothing is listening at {self.base_url} (connection refused); start the model server, or give its "
                "address with --base-url or OPENAI_BASE_URL",
                retryable=not self._preparing,
            )
        if isinstance(exc, (o.APITimeoutError, o.APIConnectionError)):
            return PolicyError(f"no answer while {where} ({type(exc).__name__}); is the server up?", retryable=True)
        if isinstance(exc, (o.APIResponseValidationError, ValueError, KeyError, TypeError, AttributeError)):
            return PolicyError(
                f"the server's answer could not be read while {where} ({type(exc).__name__}: {str(exc)[:200]})",
                retryable=True,
            )
        return PolicyError(f"{type(exc).__name__} while {where}: {str(exc)[:300]}")


NO_SERVER = (
    "no model server configured: set OPENAI_BASE_URL or pass --base-url (a local vLLM or llama.cpp server: "
    "http://localhost:8000/v1; OpenAI's API: https://api.openai.com/v1)"
)


def server_address(base_url: str | None) -> str:
    """The model server's address: --base-url, else $OPENAI_BASE_URL; never a silent default (a hosted API is a
    choice, and it costs money). Needs nothing imported, so a command can say so before it loads anything."""
    address = base_url or os.environ.get("OPENAI_BASE_URL") or ""
    if not address:
        raise EnvironmentProblem(NO_SERVER)
    check_base_url(address, "--base-url" if base_url else "OPENAI_BASE_URL")
    return address


def check_base_url(url: str, where: str) -> None:
    """One sentence for an address that is not an http(s) URL (a missing scheme is the usual slip)."""
    if not url.startswith(("http://", "https://")):
        hint = f"; write http://{url}" if "://" not in url else ""
        raise CudagentError(f"{where} {url!r} is not an http:// or https:// address{hint}")


def _refused(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ConnectionRefusedError) or "connection refused" in str(exc).lower():
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _sleep(seconds: float):
    """asyncio.sleep inside a running event loop, time.sleep outside one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        time.sleep(seconds)
        return None
    return asyncio.sleep(seconds)


def _status_text(exc) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:500]
    return str(getattr(exc, "message", exc))[:500]


def _mentions(text: str, hints) -> bool:
    low = (text or "").lower()
    return any(h in low for h in hints)


def _for_mode(messages: list[dict], mode: str) -> list[dict]:
    """In text mode the server has no tool roles: earlier native calls and tool results become plain text."""
    if mode != "text":
        return messages
    out = []
    for m in messages:
        if m.get("role") == "tool":
            out.append({"role": "user", "content": m.get("content", "")})
        elif m.get("role") == "assistant" and m.get("tool_calls"):
            out.append({"role": "assistant", "content": m.get("content") or ""})
        else:
            out.append({k: v for k, v in m.items() if k in ("role", "content")})
    return _merge_same_role(out)


def _merge_same_role(messages: list[dict]) -> list[dict]:
    """Some chat templates reject two user messages in a row; join them."""
    out: list[dict] = []
    for m in messages:
        if out and out[-1]["role"] == m["role"] == "user":
            out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n\n{m['content']}"}
        else:
            out.append(dict(m))
    return out
