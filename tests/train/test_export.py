"""Stages chain: a checkpoint written by verl's own FSDPCheckpointManager (FSDP2 over a one-process gloo group on the
CPU, in both layouts verl uses: `global_step_N/actor/` for the RL trainer, `global_step_N/` for the SFT trainer)
becomes a Hugging Face folder through verl's model merger, the next stage's `--model` takes it, and a run directory
given as `--model` is named as such."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

from tests.train.checkpoints import save_checkpoint, tiny_llama  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore")]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    """What a stage starts from."""
    return tiny_llama(tmp_path_factory.mktemp("base"))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudagent", "train", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)  # fmt: skip


@pytest.mark.parametrize("layout", ["rl", "sft"])
def test_a_stages_checkpoint_becomes_the_next_stages_model(base_model, tmp_path, layout):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path / "warmup"
    save_checkpoint(base_model, run / "checkpoints", 10, layout)
    save_checkpoint(base_model, run / "checkpoints", 20, layout)
    (run / "command.json").write_text("{}")  # what `cudagent train` writes when it starts a stage

    proc = _cli("export", str(run))
    assert proc.returncode == 0, proc.stderr
    hf = run / "hf"
    assert proc.stdout.strip() == str(hf.resolve())
    assert json.loads((hf / "cudagent-export.json").read_text())["checkpoint"].endswith("global_step_20")
    merged = AutoModelForCausalLM.from_pretrained(hf)
    base = AutoModelForCausalLM.from_pretrained(base_model)
    for (name, m), (_, b) in zip(merged.state_dict().items(), base.state_dict().items(), strict=True):
        torch.testing.assert_close(m.float(), (b + 0.5).bfloat16().float(), msg=name)  # the trained weights
    assert (
        AutoTokenizer.from_pretrained(hf)("__global__ void k()").input_ids
        == AutoTokenizer.from_pretrained(base_model)("__global__ void k()").input_ids
    )

    again = _cli("export", str(run))  # the same checkpoint: nothing merged again
    assert again.returncode == 0 and "already exported" in again.stderr

    kept = tmp_path / "kept.jsonl"
    kept.write_text(json.dumps({"prompt_ids": [1, 2], "response_ids": [3], "response_mask": [1], "reward": 3,
                                "task": "t", "valid_calls": 1, "invalid_calls": 0}) + "\n")  # fmt: skip
    nxt = _cli("--stage", "rft", "--data", str(kept), "--model", str(hf), "--gpus", "8", "--dry-run")
    assert nxt.returncode == 0, nxt.stderr
    assert f"model.path={hf.resolve()}" in nxt.stdout  # absolute: a Ray job runs elsewhere
    refused = _cli("--stage", "rft", "--data", str(kept), "--model", str(run), "--gpus", "8", "--dry-run")
    assert refused.returncode == 2 and "is a training run, not a model" in refused.stderr, refused.stderr
    assert str(hf) in refused.stderr


def test_export_leaves_a_folder_it_did_not_write_and_names_a_missing_checkpoint(base_model, tmp_path):
    run = tmp_path / "critic"
    (run / "checkpoints").mkdir(parents=True)
    empty = _cli("export", str(run), "--out", str(tmp_path / "m"))
    assert empty.returncode == 2 and "no global_step_N checkpoint" in empty.stderr, empty.stderr
    save_checkpoint(base_model, run / "checkpoints", 5, "rl")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my own")
    proc = _cli("export", str(run), "--out", str(mine))
    assert proc.returncode == 2 and "not a model cudagent exported" in proc.stderr, proc.stderr
    assert (mine / "notes.txt").read_text() == "my own" and not (tmp_path / "mine.partial").exists()
