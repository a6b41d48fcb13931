"""A stage's model as a Hugging Face folder, the form the next stage's `--model` takes.

verl saves sharded checkpoints: `checkpoints/global_step_N/actor/` for the RL stages (the policy; the critic beside
it), `checkpoints/global_step_N/` for the SFT trainer of the rft stage, each holding one FSDP shard per rank,
`fsdp_config.json` and the model's config and tokenizer under `huggingface/`. verl's own model merger
(`python -m verl.model_merger merge --backend fsdp`) joins the shards into a Hugging Face folder; it runs as a
process of its own (it holds the whole model in memory, in BF16) into a folder beside the target, which replaces
the target only once it is complete, with `cudagent-export.json` saying which checkpoint it came from. A target that
exists and was not written here is never replaced.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from cudagent.errors import CudagentError, EnvironmentProblem
from cudagent.train.command import checkpoint_step

MARKER = "cudagent-export.json"


def sharded_model(step: Path) -> Path:
    """The folder of a `global_step_N` checkpoint that holds the policy's FSDP shards."""
    for folder in (step / "actor", step):
        if (folder / "fsdp_config.json").is_file():
            return folder
    raise CudagentError(f"{step}: no FSDP checkpoint in it (no fsdp_config.json in it or in actor/)")


def checkpoints_of(run: Path) -> Path:
    """A run directory's checkpoints folder (or the folder itself, when it is one)."""
    run = Path(run).expanduser().resolve()
    return run / "checkpoints" if (run / "checkpoints").is_dir() else run


def export_model(run: Path, target: Path) -> tuple[Path, bool]:
    """Merge the latest checkpoint of `run` (a run directory, its checkpoints folder or one global_step_N) into the
    Hugging Face folder `target`. Returns the checkpoint merged and whether a merge ran (False: `target` already
    holds that checkpoint)."""
    step = checkpoint_step(checkpoints_of(run), what=str(run))
    source = sharded_model(step)
    target = Path(target).expanduser().resolve()
    record = {"checkpoint": str(step), "shards": str(source)}
    if target.exists():
        try:
            previous = json.loads((target / MARKER).read_text())
        except (OSError, ValueError):
            raise CudagentError(
                f"{target} exists and is not a model cudagent exported; give another --out or move it"
            ) from None
        if previous == record:
            return step, False
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    argv = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
            "--local_dir", str(source), "--target_dir", str(partial)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0 or not _is_model(partial):
        shutil.rmtree(partial, ignore_errors=True)
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise EnvironmentProblem(f"verl's model merger failed on {source} (exit {proc.returncode}): {last[0]}")
    (partial / MARKER).write_text(json.dumps(record, indent=1) + "\n")
    if target.exists():
        shutil.rmtree(target)
    partial.rename(target)
    return step, True


def _is_model(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))
