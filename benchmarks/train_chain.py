"""Transcript: the README's four `cudagent train` stages in sequence, each handing its model to the next.

    python benchmarks/train_chain.py [--out benchmarks/results/train/chain.txt]

What runs for real: `cudagent data export` of examples/tasks, a `cudagent serve` on the CPU with a token, each
stage's command checked and composed against verl 0.9.1 and its `validate_config` (`--dry-run`, at full scale: 8
GPUs), `cudagent train export` (verl's model merger) and the next stage taking the merged folder as `--model`. What
stands in: the training step itself (vLLM and GPUs; see the README's "What cannot run here"). In its place, verl's
own FSDPCheckpointManager writes the checkpoint a stage leaves, on the CPU, in the layout of that stage's trainer.
The model is a two-layer Llama with SmolLM2's tokenizer. Paths are printed relative to the work folder ($WORK).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.serve.service_proc import TOKEN, ServiceProcess  # noqa: E402
from tests.train.checkpoints import save_checkpoint, tiny_llama  # noqa: E402


class Transcript:
    def __init__(self, work: Path):
        self.work, self.lines = work, []

    def note(self, text: str) -> None:
        self.lines += ["", f"# {text}"]

    def run(self, *args: str, env: dict | None = None, expect: int = 0) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "cudagent", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=self.work, env=env, timeout=900)
        self.lines.append("$ cudagent " + " ".join(shlex.quote(self._short(a)) for a in args))
        for stream in (proc.stdout, proc.stderr):
            self.lines += [self._short(ln) for ln in stream.strip().splitlines()]
        self.lines.append(f"[exit {proc.returncode}]")
        if proc.returncode != expect:
            raise SystemExit("\n".join(self.lines[-30:]))
        return proc

    def _short(self, text: str) -> str:
        return text.replace(str(self.work), "$WORK").replace(str(ROOT), "$CUDAGENT")


def chain(work: Path) -> list[str]:
    t = Transcript(work)
    base = tiny_llama(work / "models" / "base")
    service = ServiceProcess(work / "serve").start()
    env = {**os.environ, "CUDAGENT_EVALUATOR_TOKEN": TOKEN, "PYTHONWARNINGS": "ignore"}
    try:
        t.note("the dataset and an evaluator: here the CPU's (on a cluster, --device cuda on an evaluator GPU host)")
        t.run("data", "export", str(ROOT / "examples" / "tasks"), "--out", "train.parquet", "--device", "cpu")
        rl = ["--data", "train.parquet", "--evaluator", service.url, "--gpus", "8"]

        t.note("stage 1, warm-up: single-turn PPO from the base model")
        t.run("train", "--stage", "warmup", *rl, "--model", str(base), "--dry-run", env=env)
        t.note("[stand-in for the PPO steps] verl's checkpoint manager writes what the warm-up leaves")
        save_checkpoint(base, work / "train-runs" / "warmup" / "checkpoints", 23, "rl")
        (work / "train-runs" / "warmup" / "command.json").write_text("{}")
        t.run("train", "export", "train-runs/warmup")

        t.note("stage 2, rejection fine-tuning from the warm-up model (kept episodes: rft-collect's output)")
        ledger = {"prompt_ids": [1, 2, 3], "response_ids": [4, 5], "response_mask": [1, 1], "reward": 3}
        (work / "kept.jsonl").write_text(json.dumps(ledger) + "\n")
        t.run("train", "--stage", "rft", "--data", "kept.jsonl", "--model", "train-runs/warmup", "--dry-run",
              expect=2)  # fmt: skip
        t.run("train", "--stage", "rft", "--data", "kept.jsonl", "--model", "train-runs/warmup/hf", "--dry-run")
        t.note("[stand-in for the SFT steps] verl's checkpoint manager writes what the SFT trainer leaves")
        save_checkpoint(work / "train-runs" / "warmup" / "hf", work / "train-runs" / "rft" / "checkpoints", 40, "sft")
        (work / "train-runs" / "rft" / "command.json").write_text("{}")
        t.run("train", "export", "train-runs/rft")

        t.note("stage 3, critic pretraining from the RFT model (the actor frozen)")
        t.run("train", "--stage", "critic", *rl, "--model", "train-runs/rft/hf", "--dry-run", env=env)
        t.note("[stand-in for the PPO steps] the critic stage's checkpoint (actor/ and, on a cluster, critic/)")
        save_checkpoint(work / "train-runs" / "rft" / "hf", work / "train-runs" / "critic" / "checkpoints", 50, "rl")

        t.note("stage 4, agentic RL: the RFT model, resuming the critic stage's checkpoint (steps 51 to 200)")
        t.run("train", "--stage", "agentic", *rl, "--model", "train-runs/rft/hf", "--resume-from",
              "train-runs/critic/checkpoints", "--dry-run", env=env)  # fmt: skip
    finally:
        service.stop()
    return t.lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/train/chain.txt")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cudagent-chain-") as tmp:
        lines = chain(Path(tmp))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    header = [f"# benchmarks/train_chain.py at {commit.stdout.strip()}: " + __doc__.splitlines()[0]]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(header + lines) + "\n")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
