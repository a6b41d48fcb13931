"""A GGUF model file as a Hugging Face folder (its tokenizer, chat template and weights in float32), for
`transformers serve` or `--model hf:PATH`: the no-API path of docs/optimize.md, and the tests' local model.

    python -m cudagent.agent.gguf MODEL.gguf DEST

transformers reads GGUF files (dequantizing them), but from 5.11 on it marks such a model as quantized and
refuses `save_pretrained` ("The model is quantized with gguf and is not serializable"). The weights it read are
plain tensors by then: they go into a model built from the same config, which saves. The folder is written beside
DEST and renamed into place, so a failure leaves nothing half-made.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def gguf_to_hf(gguf: Path, dest: Path, say=lambda text: None) -> Path:
    """Write the Hugging Face folder for `gguf` at `dest` (which must not exist); returns `dest`. `say(text)` is
    told of each step (they take up to a minute or two on a small CPU)."""
    say("loading transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, dest = Path(gguf).resolve(), Path(dest)
    if not gguf.is_file():
        raise FileNotFoundError(f"{gguf} does not exist; give the path of a .gguf model file")
    if dest.exists():
        raise FileExistsError(f"{dest} already exists; give a new folder")
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        say(f"reading the tokenizer from {gguf.name}")
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
        say(f"reading and dequantizing the weights of {gguf.name}")
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        say(f"writing {dest}")
        try:
            loaded.save_pretrained(tmp)
        except (ValueError, NotImplementedError, RuntimeError) as exc:
            if "serializ" not in str(exc).lower() and "quantiz" not in str(exc).lower():
                raise
            plain = AutoModelForCausalLM.from_config(loaded.config)  # the same architecture, not marked quantized
            plain.load_state_dict(loaded.state_dict(), strict=True)
            plain.to(next(loaded.parameters()).dtype).save_pretrained(tmp)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m cudagent.agent.gguf MODEL.gguf DEST\n")
        return 2
    try:
        done = gguf_to_hf(Path(argv[0]), Path(argv[1]), say=lambda text: print(f"cudagent: {text}...", file=sys.stderr))
    except (FileNotFoundError, FileExistsError) as exc:
        sys.stderr.write(f"cudagent: {exc}\n")
        return 2
    sys.stderr.write(f"cudagent: wrote {done}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
