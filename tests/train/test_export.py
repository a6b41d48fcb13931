"""Stages chain: a checkpoint written by verl's own FSDPCheckpointManager (FSDP2 over a one-process gloo group on the
CPU, in both layouts verl uses: `global_step_N/actor/` for the RL trainer, `global_step_N/` for the SFT trainer)
becomes a Hugging Face folder through verl's model merger, the next stage's `--model` takes it, and a run directory
given as `--model` is named as such."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore")]

_SAVE = """
import os, sys
import torch, torch.distributed as dist
from omegaconf import OmegaConf
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

base, local_path, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
dist.init_process_group("gloo", rank=0, world_size=1)
model = AutoModelForCausalLM.from_pretrained(base)
with torch.no_grad():  # as if trained: weights the base does not have
    for p in model.parameters():
        p.add_(0.5)
mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
for layer in model.model.layers:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
contents = ["model", "optimizer", "extra"]
config = OmegaConf.create({"save_contents": contents, "load_contents": contents, "async_save": False})
manager = FSDPCheckpointManager(model, optimizer, None, processing_class=AutoTokenizer.from_pretrained(base),
                                checkpoint_config=config)
manager.save_checkpoint(local_path, global_step=step)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    """A two-layer Llama with SmolLM2's tokenizer, saved as a Hugging Face folder (what a stage starts from)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from cudagent.agent.backends import load_tokenizer
    from tests.model_server import smollm2_gguf

    tok = load_tokenizer(str(smollm2_gguf()))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=65536,
                         eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)  # fmt: skip
    path = tmp_path_factory.mktemp("base")
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _save_checkpoint(base: Path, checkpoints: Path, step: int, layout: str) -> None:
    """verl's checkpoint of step `step` under `checkpoints`, with the tracker file its trainers write."""
    folder = checkpoints / f"global_step_{step}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1",
           "LOCAL_RANK": "0"}  # fmt: skip
    local = folder / "actor" if layout == "rl" else folder
    proc = subprocess.run([sys.executable, "-c", _SAVE, str(base), str(local), str(step)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(step))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudagent", "train", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)  # fmt: skip


@pytest.mark.parametrize("layout", ["rl", "sft"])
def test_a_stages_checkpoint_becomes_the_next_stages_model(base_model, tmp_path, layout):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path / "warmup"
    _save_checkpoint(base_model, run / "checkpoints", 10, layout)
    _save_checkpoint(base_model, run / "checkpoints", 20, layout)
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
    nxt = _cli("--stage", "rft", "--data", str(kept), "--model", str(hf), "--gpus", "1", "--dry-run")
    assert nxt.returncode == 0, nxt.stderr
    assert f"model.path={hf}" in nxt.stdout
    refused = _cli("--stage", "rft", "--data", str(kept), "--model", str(run), "--gpus", "1", "--dry-run")
    assert refused.returncode == 2 and "is a training run, not a model" in refused.stderr, refused.stderr
    assert str(hf) in refused.stderr


def test_export_leaves_a_folder_it_did_not_write_and_names_a_missing_checkpoint(base_model, tmp_path):
    run = tmp_path / "critic"
    (run / "checkpoints").mkdir(parents=True)
    empty = _cli("export", str(run), "--out", str(tmp_path / "m"))
    assert empty.returncode == 2 and "no global_step_N checkpoint" in empty.stderr, empty.stderr
    _save_checkpoint(base_model, run / "checkpoints", 5, "rl")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my own")
    proc = _cli("export", str(run), "--out", str(mine))
    assert proc.returncode == 2 and "not a model cudagent exported" in proc.stderr, proc.stderr
    assert (mine / "notes.txt").read_text() == "my own" and not (tmp_path / "mine.partial").exists()
