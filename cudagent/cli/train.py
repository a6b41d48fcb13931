"""`cudagent train`: the paper's stages through verl 0.9.1 (cudagent.train), and the RFT episode collection."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from cudagent.cli.app import app
from cudagent.errors import CudagentError, EnvironmentProblem, ExitCode

train_app = typer.Typer(no_args_is_help=True)
app.add_typer(train_app, name="train")


@train_app.callback(
    invoke_without_command=True,
    epilog="Examples:\n\n"
    "  cudagent train --stage warmup --data train.parquet --model ~/models/base --evaluator http://gpu1:8765 "
    "--dry-run\n\n"
    "  cudagent train --stage agentic --data train.parquet --model train-runs/rft/hf --evaluator http://gpu1:8765 "
    "--smoke\n\n"
    "  cudagent train --stage rft --data kept.jsonl --model train-runs/warmup/hf\n\n"
    "Exit codes: the stage's own (verl's) once launched; 2 bad input (data, model, stage, an override); 3 the "
    "environment (verl missing, the evaluator unreachable or refusing the token).",
)
def train(
    ctx: typer.Context,
    stage: str = typer.Option(None, help="warmup | rft | critic | agentic."),
    data: Path = typer.Option(None, help="RL stages: a `data export --format verl` parquet; rft: kept episodes."),
    model: str = typer.Option(None, help="A local Hugging Face model folder (a previous stage's RUN/hf)."),
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
        stop_command,
        write_run_record,
        write_runtime_env,
    )

    req = TrainRequest(
        stage=stage,
        data=data,
        model=str(Path(model).expanduser().resolve()),  # the job may run elsewhere (Ray): an absolute path
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
    if ray_address:  # the job runs on the cluster; the process here follows its logs; status reads what it writes
        write_runtime_env(req, dict(os.environ))
    from cudagent.train.monitor import StopRule
    from cudagent.train.supervise import Terminated, supervise

    typer.echo(f"cudagent: stage {stage} running; cudagent train status {req.out} shows its progress", err=True)
    try:
        code, why = supervise(argv, environment(req, dict(os.environ)), req.out, StopRule(),
                              stop_remote=stop_command(req))  # fmt: skip
    except Terminated:
        typer.echo(f"cudagent: terminated; the stage was stopped, checkpoints in {req.out / 'checkpoints'}", err=True)
        raise typer.Exit(128 + 15) from None
    if why:
        where = req.out / "checkpoints"
        typer.echo(f"cudagent: stopped by the BF16 stop rule ({why}); checkpoints in {where}", err=True)
        raise typer.Exit(int(ExitCode.REJECTED))
    if code == 0:
        _export_after(req.out)
    raise typer.Exit(code)


def _export_after(run: Path) -> None:
    """A finished stage leaves a Hugging Face folder (RUN/hf) for the next stage's --model."""
    from cudagent.train.export import export_model

    if not (run / "checkpoints").is_dir():  # a Ray job on a cluster whose files this machine does not see
        typer.echo(f"cudagent: no checkpoints in {run} here; on the head node, cudagent train export {run}", err=True)
        return
    step, _ = export_model(run, run / "hf")
    typer.echo(f"cudagent: stage finished; {step.name} exported to {run / 'hf'} (the next stage's --model)", err=True)


@train_app.command(
    "export",
    epilog="Examples:\n\n"
    "  cudagent train export train-runs/warmup                  # writes train-runs/warmup/hf\n\n"
    "  cudagent train export train-runs/rft/checkpoints/global_step_40 --out ~/models/rft-40\n\n"
    "Exit codes: 0 written (or already there); 2 no checkpoint, or --out holds something else; 3 the merge failed.",
)
def export(
    run: Path = typer.Argument(..., help="A stage's run directory, its checkpoints folder or one global_step_N."),
    out: Path = typer.Option(None, help="The Hugging Face folder to write; default RUN/hf."),
) -> None:
    """Merge a stage's latest checkpoint (verl's sharded FSDP files) into a Hugging Face model folder with verl's
    model merger: what the next stage's --model, vLLM and transformers load. A stage that finishes here does this
    itself."""
    from cudagent.train.export import export_model

    if not run.exists():
        raise CudagentError(f"{run}: no such run directory")
    target = out or (run / "hf" if (run / "command.json").is_file() else run.parent / f"{run.name}-hf")
    step, merged = export_model(run, target)
    typer.echo(f"{'exported' if merged else 'already exported'}: {step} -> {target}", err=True)
    typer.echo(str(Path(target).resolve()))


@train_app.command(
    "rft-collect",
    epilog="Examples:\n\n"
    "  cudagent train rft-collect --data train.parquet --samples 4 --base-url http://gpu2:8000/v1 "
    "--tokenizer train-runs/warmup/hf --evaluator http://gpu1:8765 --out kept.jsonl\n\n"
    "  cudagent train rft-collect --runs ~/.cudagent/runs --out kept.jsonl\n\n"
    "Exit codes: 0 written (even with none kept); 2 bad input; 3 the model server or evaluator unreachable.",
)
def rft_collect(
    out: Path = typer.Option(..., help="The JSON lines file of kept episodes (the rft stage's --data)."),
    data: Path = typer.Option(None, help="A verl dataset (cudagent data export): sample episodes of its tasks."),
    samples: int = typer.Option(4, help="Episodes per task (K)."),
    base_url: str = typer.Option(None, help="The warm-up model on a vLLM server (its /v1, token ids in and out)."),
    tokenizer: str = typer.Option(None, help="The served model's tokenizer directory."),
    served_model: str = typer.Option(None, help="The model name on the server (default: the one it serves)."),
    evaluator: list[str] = typer.Option(None, help="cudagent serve URL(s) scoring the episodes."),
    max_turns: int = typer.Option(150, help="Turns per episode."),
    response_tokens: int = typer.Option(131072, help="Tokens after the prompt, per episode (the agentic stage's)."),
    concurrency: int = typer.Option(8, help="Episodes at once."),
    temperature: float = typer.Option(1.0, help="Sampling temperature."),
    runs: Path = typer.Option(None, help="Instead: a runs directory of token-mode optimize runs to keep from."),
) -> None:
    """Collect the episodes the rft stage imitates: K sampled episodes per task with the warm-up model, each run and
    scored as training's rollout does, keeping those with a positive reward and every tool call valid."""
    import asyncio

    from cudagent.train.rft import collect, episodes_from_runs, write_episodes

    if runs is not None:
        if not runs.is_dir():
            raise CudagentError(f"--runs {runs}: no such directory of runs")
        episodes = episodes_from_runs(runs)
    else:
        for name, value in (("data", data), ("base-url", base_url), ("tokenizer", tokenizer), ("evaluator", evaluator)):
            if not value:
                raise typer.BadParameter("is required to sample episodes (or give --runs)", param_hint=f"--{name}")
        if samples < 1 or concurrency < 1:
            raise typer.BadParameter("must be at least 1", param_hint="--samples/--concurrency")
        from cudagent.agent.backends import BackendError, CompletionsBackend, load_tokenizer
        from cudagent.evaluator.where import evaluators
        from cudagent.train.command import read_rows
        from cudagent.train.rollout import RolloutSettings

        rows = read_rows(data)
        pool = evaluators(list(evaluator))
        asyncio.run(pool.check())  # nothing answering, a wrong token: one sentence before any episode
        settings = RolloutSettings(max_turns=max_turns, response_tokens=response_tokens)
        backend = CompletionsBackend(base_url, served_model)
        try:
            asyncio.run(backend.resolve_model())
        except BackendError as exc:
            raise EnvironmentProblem(f"the model server does not answer: {exc}") from None
        done = []

        def tell(episode: dict) -> None:
            done.append(episode)
            what = f"tier {episode['tier']}" if episode.get("reward") is not None else episode.get("error")
            typer.echo(f"{len(done)}/{len(rows) * samples} {episode['task']}#{episode['sample']}: {what}", err=True)

        episodes = asyncio.run(collect(rows, samples, backend, load_tokenizer(tokenizer), pool, settings,
                                       {"temperature": temperature}, concurrency, tell))  # fmt: skip
    kept = write_episodes(episodes, out)
    typer.echo(f"kept {kept} of {len(episodes)} episodes in {out}", err=True)


@train_app.command("status")
def status(run_dir: Path = typer.Argument(..., help="A run directory made by cudagent train run.")) -> None:
    """The stage, the last step (reward, tiers, faster-than-compile rate, turns, tokens), the BF16 monitors and the
    stop rule's verdict, as JSON; RUN/progress.png plots reward and faster-than-compile rate per step."""
    from cudagent.train.status import summarize

    if not (run_dir / "command.json").is_file():
        raise CudagentError(f"{run_dir} is not a cudagent train run (no command.json)")
    typer.echo(json.dumps(summarize(run_dir), indent=2))
