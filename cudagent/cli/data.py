"""`cudagent data`: seed tasks, composed tasks, and filtering a folder of tasks into a dataset."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from cudagent.cli.app import app
from cudagent.cli.options import device_option
from cudagent.errors import CudagentError, ExitCode

data_app = typer.Typer(
    help="Make task datasets: seed operators, tasks composed from them, and the filters that decide what a dataset "
    "keeps (runs, deterministic, torch.compile agrees, not degenerate, runtime window, not a copy of KernelBench).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(data_app, name="data")


def _scale(value: str) -> str:
    if value not in ("cpu", "gpu"):
        raise typer.BadParameter("use cpu (small inputs) or gpu (the paper's sizes)", param_hint="--scale")
    return value


@data_app.command("seeds")
def seeds(
    out: Path = typer.Option(..., help="Folder to write one task file per seed operator into."),
    scale: str = typer.Option("cpu", help="Input sizes: cpu (small) or gpu (large)."),
    from_module: Path = typer.Option(
        None,
        help="Instead: a task file of your own model; each of its leaf modules (nn.Linear, nn.LayerNorm, ...) becomes "
        "a seed task with the input shapes your get_inputs gives it.",
    ),
    hf: bool = typer.Option(
        True, "--transformers/--no-transformers", help="Add transformers' building blocks when it is installed."
    ),
) -> None:
    """Write a KernelBench-style task file for every seed operator (activations, reductions, norms, linear layers,
    convolutions, pooling, and transformers' blocks), or for the leaf modules of your own model."""
    from cudagent.data.compose import seed_task
    from cudagent.data.ops import OPS
    from cudagent.data.seeds import from_module as leaf_seeds
    from cudagent.data.seeds import transformers_seeds

    _scale(scale)
    if from_module is not None:
        if not from_module.is_file():
            raise CudagentError(f"{from_module} does not exist; give a task file (Model, get_inputs, get_init_inputs)")
        seeds, skipped = leaf_seeds(from_module)
        out.mkdir(parents=True, exist_ok=True)
        for seed in seeds:
            (out / f"{seed.name}.py").write_text(seed.source)
        for why in skipped:
            typer.echo(f"skipped {why}", err=True)
        typer.echo(f"wrote {len(seeds)} seed tasks from the leaf modules of {from_module.name} to {out}", err=True)
        return
    out.mkdir(parents=True, exist_ok=True)
    for op in OPS:
        task = seed_task(op.name, scale)
        (out / f"{task.name}.py").write_text(task.source)
    extra = transformers_seeds() if hf else []
    for seed in extra:
        (out / f"{seed.name}.py").write_text(seed.source)
    typer.echo(f"wrote {len(OPS) + len(extra)} seed tasks to {out}", err=True)


@data_app.command("synth")
def synth(
    out: Path = typer.Option(..., help="Folder to write the composed task files into."),
    count: int = typer.Option(50, help="How many tasks to compose."),
    seed: int = typer.Option(0, help="The first seed number; task i uses seed + i, so a run is reproducible."),
    max_ops: int = typer.Option(5, help="Most operators chained in one task (1-5)."),
    scale: str = typer.Option("cpu", help="Input sizes: cpu (small) or gpu (large)."),
    model: str = typer.Option(
        None, help="Let this model compose the seeds (any OpenAI-compatible server; `auto`: its first model)."
    ),
    base_url: str = typer.Option(None, help="The model's endpoint; default $OPENAI_BASE_URL."),
    api_key: str = typer.Option(None, help="API key; default $OPENAI_API_KEY."),
    temperature: float = typer.Option(0.8, help="Sampling temperature of the model."),
    reply_tokens: int = typer.Option(2048, help="Most tokens the model may write for one task."),
) -> None:
    """Compose tasks from seed operators. Without --model: chains of seeds whose shapes fit (elementwise ops,
    reductions, norms, matmuls, convolutions, pooling), sizes drawn from the seed, offline and reproducible. With
    --model: the model composes 1-5 seeds into each task (prompts/data_compose.j2); answers without usable code are
    recorded in OUT/synth.jsonl and skipped."""
    from cudagent.data.compose import distinct

    _scale(scale)
    if count <= 0:
        raise typer.BadParameter("must be positive", param_hint="--count")
    if not 1 <= max_ops <= 5:
        raise typer.BadParameter("must be 1 to 5", param_hint="--max-ops")
    if reply_tokens <= 0:
        raise typer.BadParameter("must be positive", param_hint="--reply-tokens")
    out.mkdir(parents=True, exist_ok=True)
    if model is not None or base_url is not None:
        _synth_with_model(out, count, seed, max_ops, scale, model, base_url, api_key, temperature, reply_tokens)
        return
    tasks = distinct(seed, count, scale, max_ops)
    for task in tasks:
        (out / f"{task.name}.py").write_text(task.source)
    last = tasks[-1].seed if tasks else seed
    typer.echo(f"wrote {len(tasks)} composed tasks to {out} (seeds {seed}..{last}, each a different chain)", err=True)


def _synth_with_model(out, count, seed, max_ops, scale, model, base_url, api_key, temperature, reply_tokens) -> None:
    import asyncio

    from cudagent.agent.openai_policy import OpenAIChatPolicy
    from cudagent.agent.prompting import Prompts
    from cudagent.data.synth_llm import compose_with_model

    def tell(text: str) -> None:
        typer.echo(f"cudagent: {text}", err=True)

    policy = OpenAIChatPolicy(
        on_retry=tell,
        base_url=base_url,
        api_key=api_key,
        model=None if model in (None, "auto") else model,
        mode="text",
        temperature=temperature,
        max_tokens=reply_tokens,
    )
    policy.prepare()  # nothing listening fails here, at once

    def show(row: dict) -> None:
        outcome = row.get("file") or f"dropped: {row['dropped']}"
        typer.echo(f"seed {row['seed']} ({' + '.join(row['ops'])}): {outcome}", err=True)

    rows = asyncio.run(compose_with_model(policy, Prompts(), seed, count, out, scale, max_ops, show))
    made = sum(1 for r in rows if r.get("file"))
    typer.echo(f"wrote {made} of {count} tasks to {out} ({count - made} answers without usable code)", err=True)


@data_app.command("filter")
def filter_tasks(
    tasks_dir: Path = typer.Argument(..., help="A folder of task files (or a KernelBench checkout)."),
    out: Path = typer.Option(..., help="Where filter.jsonl, the kept tasks (tasks/) and the report go."),
    device: str = device_option("Where the running filters run: the GPUs or the CPU."),
    runtime_ms: str = typer.Option(
        None, help="Keep tasks whose reference runs LO,HI ms (default: 1,100 on a GPU, the paper's; 0.01,1000 on CPU)."
    ),
    against: Path = typer.Option(
        None, help="A KernelBench checkout (or folder of tasks) to decontaminate against: no task may be too similar."
    ),
    max_similarity: float = typer.Option(0.9, help="Drop tasks at least this similar to a reference task."),
    compile_backend: str = typer.Option(
        None, "--compile", help="torch.compile backend for the agreement filter (default inductor), or off."
    ),
    jobs: int = typer.Option(
        None, help="Workers at once on the CPU, or per GPU (default 1); their timings still run one at a time."
    ),
    timeout: float = typer.Option(300.0, help="Seconds one task's running filters may take."),
    resume: bool = typer.Option(False, "--resume", help="Keep the verdicts already in OUT and filter the rest."),
    as_json: bool = typer.Option(False, "--json", help="One JSON line per task, then a summary object."),
) -> None:
    """Run every filter on a folder of tasks; keep those that pass in OUT/tasks/ (a folder `cudagent bench` runs)
    and write a report of what each filter dropped and why."""
    from cudagent.bench.tasks import discover
    from cudagent.cli.progress import TaskProgress
    from cudagent.data.pipeline import FilterConfig, Pipeline, done_rows
    from cudagent.data.report import build_report, write_report
    from cudagent.device.info import resolve_device

    if not 0 < max_similarity <= 1:
        raise typer.BadParameter("must be in (0, 1]", param_hint="--max-similarity")
    if jobs is not None and jobs <= 0:
        raise typer.BadParameter("must be positive", param_hint="--jobs")
    files = [t.path for t in discover(tasks_dir)]
    if not files:
        raise CudagentError(f"no task files in {tasks_dir}")
    dev = resolve_device(device)
    window = _window(runtime_ms, dev.is_cuda)
    references = {}
    if against is not None:
        references = {t.key: t.path.read_text(errors="replace") for t in discover(against)}
        if not references:
            raise CudagentError(f"no task files in {against} to decontaminate against")
    if dev.is_cuda:
        import torch

        slots = [str(i) for i in range(torch.cuda.device_count()) for _ in range(jobs or 1)]
    else:
        slots = [None] * (jobs or 1)
    config = FilterConfig(
        device=dev.kind,
        slots=slots,
        runtime_ms=window,
        compile_backend=compile_backend or "inductor",
        references=references,
        max_similarity=max_similarity,
        timeout_s=timeout,
        resume=resume,
    )

    pending = len(files) - (len(done_rows(out)) if resume else 0)
    progress = TaskProgress(max(0, pending), enabled=not as_json and sys.stderr.isatty(), label="filter")

    def show(row: dict) -> None:
        if as_json:
            typer.echo(json.dumps({"event": "task", **row}, default=str))
        status = f"dropped by {row['dropped_by']}: {row['why']}" if row.get("dropped_by") else "kept"
        runtime = f" ({row['runtime_ms']:.3g} ms)" if row.get("runtime_ms") else ""
        if not as_json:
            progress.done(f"{row['name']}: {status}{runtime}")

    with progress:
        rows = Pipeline(config, out, show).run(files)
    meta = {
        "source": str(tasks_dir),
        "device": dev.name,
        "runtime_ms": list(window),
        "compile": config.compile_backend,
        "max_similarity": max_similarity,
        "references": len(references),
    }
    report = build_report(rows, meta)
    paths = write_report(report, out)
    if as_json:
        typer.echo(json.dumps({"event": "summary", **report, "files": {k: str(p) for k, p in paths.items()}}))
    else:
        dropped = ", ".join(f"{k} {v}" for k, v in report["dropped"].items() if v) or "none"
        typer.echo(f"kept {report['kept']} of {report['tasks']} tasks (dropped: {dropped})", err=True)
        typer.echo(f"report: {paths['markdown']}; kept tasks: {out / 'tasks'}", err=True)
    raise typer.Exit(int(ExitCode.OK))


def _window(value: str | None, cuda: bool) -> tuple[float, float]:
    if value is None:
        return (1.0, 100.0) if cuda else (0.01, 1000.0)
    try:
        lo, hi = (float(x) for x in value.split(","))
    except ValueError:
        raise typer.BadParameter("give LO,HI in milliseconds, e.g. 1,100", param_hint="--runtime-ms") from None
    if not 0 <= lo < hi:
        raise typer.BadParameter("LO must be below HI, both non-negative", param_hint="--runtime-ms")
    return lo, hi


@data_app.command("import")
def import_(
    source: Path = typer.Argument(
        ..., help="A published task set (CUDA-Agent-Ops-6K's .parquet, .json or .jsonl) or a KernelBench checkout."
    ),
    out: Path = typer.Option(..., help="Folder to write the task files into (then run `cudagent data filter` on it)."),
    level: str = typer.Option(None, help="KernelBench levels to import, e.g. 1,2 (default: all)."),
) -> None:
    """Bring a published task set into the task-folder form the filters, `export` and `cudagent bench` read."""
    from cudagent.data.io import import_folder, import_records

    if source.is_dir():
        n = import_folder(source, out, [x.strip() for x in level.split(",")] if level else None)
        typer.echo(f"imported {n} task files from {source} to {out}", err=True)
        return
    if not source.is_file():
        raise CudagentError(f"{source} does not exist; give a .parquet, .json or .jsonl file, or a folder")
    if source.suffix.lower() not in (".parquet", ".json", ".jsonl"):
        raise CudagentError(f"{source.name}: give a .parquet, .json or .jsonl file, or a folder of task files")
    written, skipped, column = import_records(source, out)
    note = f"; {skipped} rows without task code skipped" if skipped else ""
    typer.echo(f"imported {written} tasks from column {column!r} of {source.name} to {out}{note}", err=True)


@data_app.command("export")
def export(
    tasks_dir: Path = typer.Argument(..., help="A folder of task files (e.g. a filter run's OUT/tasks)."),
    out: Path = typer.Option(..., help="verl: the .parquet file to write; tasks: the folder to write."),
    fmt: str = typer.Option(
        "verl", "--format", help="verl (training parquet) or tasks (a folder cudagent bench runs)."
    ),
    data_source: str = typer.Option(None, help="verl's data_source column (default: cudagent/<folder name>)."),
    device: str = device_option("The device the prompts describe (the one training will evaluate on)."),
    workspace: str = typer.Option("/workspace", help="The workspace path the task prompt names."),
) -> None:
    """Write a folder of tasks as verl's training parquet (the prompts `optimize` opens with, agent_name,
    data_source, extra_info with each task's source and id) or as a folder of tasks for `cudagent bench`."""
    import shutil

    from cudagent.bench.tasks import discover
    from cudagent.data.io import verl_rows, write_parquet

    files = [t.path for t in discover(tasks_dir)]
    if not files:
        raise CudagentError(f"no task files in {tasks_dir}")
    if fmt == "tasks":
        out.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copyfile(f, out / f.name)
        typer.echo(f"wrote {len(files)} tasks to {out}", err=True)
        return
    if fmt != "verl":
        raise typer.BadParameter("use verl or tasks", param_hint="--format")
    if out.suffix != ".parquet":
        raise CudagentError(f"{out}: verl reads parquet; give a path ending in .parquet")
    from cudagent.device.info import resolve_device
    from cudagent.evaluator.local import environment

    dev = resolve_device(device)
    rows = verl_rows(
        files, data_source or f"cudagent/{tasks_dir.resolve().name}", environment(dev), dev.kind, workspace
    )
    write_parquet(rows, out)
    typer.echo(f"wrote {len(rows)} rows to {out}", err=True)
