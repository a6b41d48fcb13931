"""Token backends: token ids in, sampled token ids and their log-probabilities out.

    generate(request_id, *, prompt_ids, sampling_params) -> TokenOutput(token_ids, log_probs, stop_reason)

is the shape of verl 0.9.1's rollout server client, so verl's own is passed to the token driver unchanged. Here:

    HFBackend           a Hugging Face transformers model on this machine (GPU if there is one), GGUF included
    CompletionsBackend  a vLLM server's /v1/completions with token-id prompts and per-token log-probabilities
    ScriptedBackend     replies written in advance (tests, benchmarks), tokenized by the real tokenizer

sampling_params: max_tokens (required), temperature (default 1.0; 0 is greedy), top_p (default 1.0).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable


@dataclass
class TokenOutput:
    token_ids: list[int]
    log_probs: list[float]
    stop_reason: str  # "stop" (an end token) or "length" (max_tokens)


@runtime_checkable
class TokenBackend(Protocol):
    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict) -> TokenOutput: ...


class BackendError(RuntimeError):
    """The backend could not produce tokens (it is unreachable, or refused the request)."""


def load_tokenizer(path: str):
    """A tokenizer from a Hugging Face model directory, a hub-style name already cached, or a .gguf file."""
    from transformers import AutoTokenizer

    directory, gguf = _split_gguf(path)
    if gguf:
        return AutoTokenizer.from_pretrained(directory, gguf_file=gguf)
    return AutoTokenizer.from_pretrained(directory)


def _split_gguf(path: str) -> tuple[str, str | None]:
    p = Path(path).expanduser()
    if p.suffix == ".gguf":
        return str(p.parent), p.name
    if p.is_dir():
        ggufs = sorted(p.glob("*.gguf"))
        if ggufs and not (p / "config.json").exists():
            return str(p), ggufs[0].name
    return str(p), None


class HFBackend:
    """One model, generating for one request at a time (in a worker thread, so the event loop stays free)."""

    def __init__(self, path: str, device: str | None = None, tokenizer=None, seed: int | None = None):
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # its bars would tear through the run's live panel

        directory, gguf = _split_gguf(path)
        self.name = Path(path).name
        self.tokenizer = tokenizer or load_tokenizer(path)
        kwargs = {"gguf_file": gguf} if gguf else {}
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = AutoModelForCausalLM.from_pretrained(directory, **kwargs).to(self.device).eval()
        self.generator = torch.Generator(device=self.device)
        if seed is not None:
            self.generator.manual_seed(seed)
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos or [self.tokenizer.eos_token_id])
        self._lock = asyncio.Lock()

    def describe(self) -> dict:
        return {"kind": "hf", "model": self.name, "device": str(self.device)}

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict) -> TokenOutput:
        async with self._lock:
            return await asyncio.to_thread(self._generate, prompt_ids, sampling_params)

    def _generate(self, prompt_ids: list[int], params: dict) -> TokenOutput:
        """Sample token by token with a KV cache; each log-probability is of the distribution sampled from."""
        import torch

        temperature = float(params.get("temperature", 1.0))
        top_p = float(params.get("top_p", 1.0))
        max_tokens = int(params["max_tokens"])
        ids, logprobs = [], []
        with torch.no_grad():
            out = self.model(torch.tensor([prompt_ids], device=self.device), use_cache=True)
            for _ in range(max_tokens):
                logits = out.logits[0, -1].float()
                if temperature > 0:
                    logp = torch.log_softmax(logits / temperature, dim=-1)
                    probs = _top_p(logp.exp(), top_p)
                    token = int(torch.multinomial(probs, 1, generator=self.generator))
                else:
                    logp = torch.log_softmax(logits, dim=-1)
                    token = int(logp.argmax())
                ids.append(token)
                logprobs.append(float(logp[token]))
                if token in self.eos_ids:
                    return TokenOutput(ids, logprobs, "stop")
                out = self.model(
                    torch.tensor([[token]], device=self.device), past_key_values=out.past_key_values, use_cache=True
                )
        return TokenOutput(ids, logprobs, "length")


def _top_p(probs, top_p: float):
    if top_p >= 1.0:
        return probs
    import torch

    sorted_probs, order = torch.sort(probs, descending=True)
    keep = torch.cumsum(sorted_probs, 0) - sorted_probs < top_p
    filtered = torch.zeros_like(probs)
    filtered[order[keep]] = probs[order[keep]]
    return filtered / filtered.sum()


class CompletionsBackend:
    """A vLLM server (`vllm serve MODEL`): the prompt goes as token ids, and the reply comes back as token ids
    (`return_tokens_as_token_ids`) with the log-probability of each sampled token."""

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None, timeout_s: float = 600):
        import openai

        self.base_url = base_url.rstrip("/")
        self.model = model
        self._openai = openai
        self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=api_key or "none", timeout=timeout_s)

    def describe(self) -> dict:
        return {"kind": "completions", "model": self.model, "base_url": self.base_url}

    async def resolve_model(self) -> str:
        if not self.model:
            models = await self._call(self._client.models.list())
            data = list(getattr(models, "data", None) or [])
            if not data:
                raise BackendError(f"the server at {self.base_url} lists no models; pass --model")
            self.model = data[0].id
        return self.model

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict) -> TokenOutput:
        model = await self.resolve_model()
        response = await self._call(
            self._client.completions.create(
                model=model,
                prompt=prompt_ids,
                max_tokens=int(sampling_params["max_tokens"]),
                temperature=float(sampling_params.get("temperature", 1.0)),
                top_p=float(sampling_params.get("top_p", 1.0)),
                logprobs=0,
                extra_body={"return_tokens_as_token_ids": True, "skip_special_tokens": False},
            )
        )
        try:
            choice = response.choices[0]
            ids = [int(str(t).split(":", 1)[1]) for t in choice.logprobs.tokens]
            logprobs = [float(x) if x is not None else 0.0 for x in choice.logprobs.token_logprobs]
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            raise BackendError(
                f"the server at {self.base_url} did not answer with token ids and log-probabilities ({exc}); "
                "token mode needs vLLM's return_tokens_as_token_ids"
            ) from None
        logprobs = [x if math.isfinite(x) else 0.0 for x in logprobs]
        return TokenOutput(ids, logprobs, "length" if choice.finish_reason == "length" else "stop")

    async def _call(self, request):
        try:
            return await request
        except self._openai.APIError as exc:
            raise BackendError(f"{self.base_url}: {type(exc).__name__}: {str(exc)[:300]}") from None

    async def close(self) -> None:
        await self._client.close()


class ScriptedBackend:
    """Replies written in advance: `replies(i, prompt_ids)` gives the text of reply i, which the real tokenizer
    turns into ids (with the end token), each with log-probability -1."""

    def __init__(self, tokenizer, replies, eos: bool = True):
        self.tokenizer, self.replies, self.eos = tokenizer, replies, eos
        self.calls = 0

    def describe(self) -> dict:
        return {"kind": "scripted", "model": "scripted"}

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict) -> TokenOutput:
        text = self.replies(self.calls, prompt_ids)
        self.calls += 1
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        stop = "stop"
        if self.eos:
            ids.append(self.tokenizer.eos_token_id)
        limit = int(sampling_params["max_tokens"])
        if len(ids) > limit:
            ids, stop = ids[:limit], "length"
        return TokenOutput(ids, [-1.0] * len(ids), stop)
