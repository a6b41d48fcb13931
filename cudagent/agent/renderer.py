"""Messages to token ids with the model's own chat template, appending only what is new.

The opening is rendered once. After that, each turn's new messages (observations, notices) are rendered as a
continuation: the template is applied to a fixed three-message base conversation followed by the new messages, and
the text the base alone renders to is cut off. That costs the same at turn 150 as at turn 1, never re-renders (or
re-tokenizes) anything the model already saw or sampled, and works with any template that renders a conversation
left to right. The text a template puts after an assistant turn's end token (ChatML's newline) is added when the
model stopped on that token, and the end token too when the model was cut off, so the stream reads as the template
would have rendered it.
"""

from __future__ import annotations

_BASE = [
    {"role": "system", "content": "-"},
    {"role": "user", "content": "-"},
    {"role": "assistant", "content": "-"},
]


class RendererError(ValueError):
    """The chat template cannot be rendered incrementally."""


class ChatRenderer:
    def __init__(self, tokenizer):
        self.tok = tokenizer
        self._base = self._render(_BASE, generation=False)
        # the assistant turn's end token and what the template writes after it, read from the template itself (a
        # tokenizer's eos_token can be another token: SmolLM2's GGUF says <|im_start|>, its turns end <|im_end|>)
        self.eos, self.after_eos, end_id = self._turn_end()
        self.stop_ids = set(_ids_of(tokenizer.eos_token_id)) | set(_ids_of(end_id))
        generation = getattr(tokenizer, "generation_config", None)
        if generation is not None:
            self.stop_ids |= set(_ids_of(getattr(generation, "eos_token_id", None)))

    def _turn_end(self) -> tuple[str, str, int | None]:
        """(end token, text after it, its id) of an assistant turn as the base renders it; the tokenizer's eos_token
        when the template writes no special token right after the assistant's content."""
        suffix = self._base[self._base.rfind(_BASE[-1]["content"]) + len(_BASE[-1]["content"]) :]
        ids = self.encode(suffix)
        # special or added tokens (a GGUF tokenizer may register <|im_end|> as added, not special)
        special = set(getattr(self.tok, "all_special_ids", []) or []) | set(self.tok.get_added_vocab().values())
        if ids and ids[0] in special:
            token = self.tok.convert_ids_to_tokens(ids[0])
            if suffix.startswith(token):
                return token, suffix[len(token) :], ids[0]
        eos = self.tok.eos_token or ""
        cut = self._base.rfind(eos) if eos else -1
        return eos, (self._base[cut + len(eos) :] if cut >= 0 else ""), None

    def _render(self, messages: list[dict], generation: bool) -> str:
        return self.tok.apply_chat_template(messages, add_generation_prompt=generation, tokenize=False)

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def opening_ids(self, messages: list[dict]) -> list[int]:
        return self.encode(self._render(messages, generation=True))

    def delta_ids(self, messages: list[dict], model_stopped: bool) -> list[int]:
        """The ids of `messages` following an assistant turn, up to the next assistant turn's header.
        `model_stopped`: the model's last turn ended on its end token (else it was cut off before it)."""
        full = self._render(_BASE + messages, generation=True)
        if not full.startswith(self._base):
            raise RendererError(
                "this chat template renders earlier turns differently once later ones follow; it cannot be used "
                "to append observations token by token"
            )
        head = self.after_eos if model_stopped else self.eos + self.after_eos
        return self.encode(head + full[len(self._base) :])


def _ids_of(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]
