"""A tiny model, and a checkpoint as verl's trainers write it, made by verl's own FSDPCheckpointManager: FSDP2
over a one-process gloo group on the CPU, weights moved off the base model's (as training would), the tracker file
beside it. For the tests of stage chaining and the chain transcript (benchmarks/train_chain.py), where no PPO step
can run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

SAVE = """
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


def save_checkpoint(base: Path, checkpoints: Path, step: int, layout: str) -> None:
    """verl's checkpoint of step `step` under `checkpoints`, with the tracker file its trainers write."""
    folder = checkpoints / f"global_step_{step}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1",
           "LOCAL_RANK": "0"}  # fmt: skip
    local = folder / "actor" if layout == "rl" else folder
    proc = subprocess.run([sys.executable, "-c", SAVE, str(base), str(local), str(step)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"verl's checkpoint manager failed:\n{proc.stderr[-3000:]}")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(step))


def tiny_llama(path: Path) -> Path:
    """A two-layer Llama with SmolLM2's tokenizer and chat template, saved as a Hugging Face folder at `path`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from cudagent.agent.backends import load_tokenizer
    from tests.model_server import smollm2_gguf

    tok = load_tokenizer(str(smollm2_gguf()))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=65536,
                         eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path
