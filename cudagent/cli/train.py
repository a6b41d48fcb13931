"""`cudagent train`: the paper's stages through verl 0.9.1 (cudagent.train), and the RFT episode collection."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import typer

from cudagent.cli.app import app
from cudagent.errors import CudagentError, ExitCode

train_app = typer.Typer(no_args_is_help=True)
app.add_typer(train_app, name="train")


@train_app.callback(
    invoke_without_command=True,
    epilog="Examples:\n\n"
    "  cudagent train --stage warmup --data train.parquet --model ~/models/base --evaluator http://gpu1:8765 "
    "--dry-run\n\n"
    "  cudagent train --stage agentic --data train.parquet --model ~/ckpt/rft --evaluator http://gpu1:8765 "
    "--smoke\n\n"
    "  cudagent train --stage rft --data kept.jsonl --model ~/models/warm\n\n"
    "Exit codes: the stage's own (verl's) once launched; 2 bad input (data, model, stage, an override); 3 the "
    "environment (verl missing, the evaluator unreachable or refusing the token).",
)
def train(
    ctx: typer.Context,
    stage: str = typer.Option(None, help="warmup | rft | critic | agentic."),
    data: Path = typer.Option(None, help="RL stages: a `data export --format verl` parquet; rft: kept episodes."),
    model: str = typer.Option(None, help="A local Hugging Face model directory (the stage's starting weights)."),
    evaluator: list[str] = typer.Option(None, help="cudagent serve URL(s) scoring the rollouts (RL stages)."),
    out: Path = typer.Option(None, help="The run directory (metrics.jsonl, checkpoints); default train-runs/STAGE."),
    override: list[str] = typer.Option(None, "--override", "-o", help="A verl/Hydra key=value, applied last."),
    smoke: bool = typer.Option(False, help="Layer the one-node smoke config (small context, 2 steps)."),
    gpus: int = typer.Option(8, help="GPUs per node."),
    resume_from: Path = typer.Option(None, help="A checkpoint directory to resume (agentic: the critic stage's)."),
    ray_address: str = typer.Option(None, help="Submit with `ray job submit --address` instead of running here."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the command and run nothing (checks the input)."),
) -> None:
    """Train a policy with optimize's loop, tools and reward through verl 0.9.1 + Ray (pip install "cudagent[train]"):
    one stage per call; checks what it can, then runs (or submits) verl with cudagent's stage config."""
    if ctx.invoked_subcommand is not None:
        return
    for name, value in (("stage", stage), ("data", data), ("model", model)):
        if value is None:
            raise typer.BadParameter("is required to run a stage", param_hint=f"--{name}")
    from cudagent.train.command import (
        TrainRequest,
        command,
        environment,
        preflight,
        printable,
        write_run_record,
    )

    req = TrainRequest(
        stage=stage,
        data=data,
        model=str(Path(model).expanduser()),
        out=out or Path("train-runs") / stage,
        evaluator_urls=list(evaluator or []),
        overrides=list(override or []),
        smoke=smoke,
        ray_address=ray_address,
        gpus=gpus,
        resume_from=resume_from,
    )
    preflight(req, dict(os.environ), check_verl=not dry_run)
    argv = command(req)
    typer.echo(printable(argv))
    if dry_run:
        return
    write_run_record(req, argv)
    typer.echo(f"cudagent: stage {stage} running; metrics in {req.out / 'metrics.jsonl'}", err=True)
    raise typer.Exit(subprocess.call(argv, env=environment(req, dict(os.environ))))


@train_app.command("rft-collect")
def rft_collect(
    runs: Path = typer.Argument(..., help="A runs directory of token-mode optimize runs (CUDAGENT_HOME/runs)."),
    out: Path = typer.Option(..., help="The JSON lines file of kept episodes (the rft stage's --data)."),
) -> None:
    """Keep the token-mode episodes worth imitating (a positive reward and every tool call valid) for the rft stage."""
    from cudagent.train.rft import episodes_from_runs, write_episodes

    if not runs.is_dir():
        raise CudagentError(f"{runs}: no such directory of runs")
    episodes = episodes_from_runs(runs)
    kept = write_episodes(episodes, out)
    typer.echo(f"kept {kept} of {len(episodes)} token-mode episodes in {out}", err=True)


@train_app.command("status")
def status(run_dir: Path = typer.Argument(..., help="A run directory made by cudagent train run.")) -> None:
    """The stage, the last step and its reward, turns, tokens and BF16 monitors (from verl's metrics.jsonl)."""
    from cudagent.train.status import summarize

    if not (run_dir / "command.json").is_file():
        raise CudagentError(f"{run_dir} is not a cudagent train run (no command.json)")
    summary = summarize(run_dir)
    typer.echo(json.dumps(summary, indent=2))
    if summary.get("steps", 0) == 0:
        raise typer.Exit(int(ExitCode.OK))
