"""`cudagent hotspots`: where a user's own model spends its time, ranked by module and operator."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from cudagent.cli.app import app
from cudagent.cli.options import device_option, dtype_option, model_option
from cudagent.errors import ExitCode

MODEL_HELP = (
    "The file that defines your nn.Module, with its class: model.py:Block (or model.py when it defines one). "
    "Not with --hf."
)


@app.command(
    epilog="Examples:\n\n"
    "  cudagent hotspots model.py:Block --inputs 'x=bf16[8,1024,768]'\n\n"
    "  cudagent hotspots model.py:Block --init '[768]' --example run_model.py\n\n"
    "  cudagent hotspots --hf ./gpt2-config --inputs 'input_ids=i64[4,256]<50257'\n\n"
    "Inputs: name=dtype[shape] for tensors (f32 f16 bf16 f64 i64 i32 i8 u8 bool; <N bounds integers), Python "
    "values as they are, several separated by commas; positional ones first. Exit code 0 when the model ran, 2 for "
    "a model or inputs that cannot be used, 3 for a machine that cannot run it."
)
def hotspots(
    target: str = typer.Argument(None, help=MODEL_HELP, show_default=False),
    module: str = model_option("module"),
    inputs: str = model_option("inputs"),
    init: str = model_option("init"),
    example: Path = model_option("example"),
    hf: Path = model_option("hf"),
    device: str = device_option("Where to run the model: the GPU, or the CPU."),
    iterations: int = typer.Option(5, help="Calls profiled (after two warm-up calls)."),
    top: int = typer.Option(15, help="Spots shown in the table and the chart."),
    tasks: int = typer.Option(
        0,
        help="Turn the first N spots into task files (tasks/ beside the table), each at its inputs with the model's "
        "weights and validated; `cudagent optimize` takes each of them. Alike modules share one task and count once.",
    ),
    dtype: str = dtype_option(),
    regions: bool = typer.Option(
        True,
        "--regions/--modules",
        help="Rank fusion regions (a GEMM or convolution with its epilogue, a norm with its residual, gated "
        "products, attention), found in the model's graph (torch.export) and each measured alone, or its leaf modules "
        "and the operators each calls. A model that cannot be captured as a graph is ranked by modules (said in one "
        "line). --tasks writes the first N region kinds (or spots) as tasks.",
    ),
    out: Path = typer.Option(
        None, help="Where hotspots.json, hotspots.md and hotspots.png go (default: hotspots/ in cudagent's home)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the ranking as one JSON object."),
) -> None:
    """Profile a user's own model (not a KernelBench task) and rank where its time goes: leaf modules, and the
    operators each module's own forward calls, with their share of the time, calls, shapes and dtypes."""
    from cudagent.device.info import resolve_device
    from cudagent.settings import Settings
    from cudagent.usermodel.hotspots import profile_user_model
    from cudagent.usermodel.loading import load_user_model

    if iterations <= 0 or top <= 0 or tasks < 0:
        raise typer.BadParameter("must be positive", param_hint="--iterations / --top / --tasks")
    say = lambda text: typer.echo(f"cudagent: {text}...", err=True)  # noqa: E731  (no silent stretch in a log)
    user = load_user_model(target, module, inputs, init, example, hf)  # a missing file: one sentence, before torch
    dev = resolve_device(device)
    say(f"building {user.name} on {dev.kind}" + (f" in {dtype}" if dtype else ""))
    model, args, kwargs = user.make(seed=0, device=dev.kind, dtype=dtype)
    cut_note = None
    if regions:
        say("capturing its graph (torch.export) and timing each fusion region in rounds")
        cut_note = _regions(user, model, args, kwargs, dev.kind, top, tasks, out, as_json, dtype)
        typer.echo(f"cudagent: {cut_note}", err=True)
    say(f"profiling {iterations} calls")
    found = profile_user_model(user, model, args, kwargs, dev.kind, iterations)
    directory = out or Settings.from_env().home / "hotspots" / f"{_stem(user.name)}-{time.strftime('%Y%m%d-%H%M%S')}"
    directory.mkdir(parents=True, exist_ok=True)
    notes = [*user.notes, *([cut_note] if cut_note else [])]
    record = {**found.to_dict(), "inputs": user.inputs.text(dtype), "built": user.source, "notes": notes}
    if tasks:
        from cudagent.text import counted
        from cudagent.usermodel.extract import extract_spots

        say(f"turning the first spots into {counted(tasks, 'validated task file')}")
        extracted = extract_spots(model, found, tasks, directory / "tasks", dev.kind, user.name)
        record["tasks"] = [e.to_dict() for e in extracted]
    (directory / "hotspots.json").write_text(json.dumps(record, indent=2) + "\n")
    (directory / "hotspots.md").write_text(found.markdown(top))
    found.chart(str(directory / "hotspots.png"), top)
    if as_json:
        typer.echo(json.dumps({**record, "directory": str(directory)}))
    else:
        _print(found, user, top, directory, dtype)
        for e in record.get("tasks", []):
            said = f"task {e['task']}" if e["task"] else f"no task: {e['reason']}"
            typer.echo(f"spot {e['spot']} ({100 * e['share']:.1f}%): {said}", err=True)
    written = [e["task"] for e in record.get("tasks", []) if e["task"]]
    _tasks_written(written, tasks, directory, len(record.get("tasks", [])), as_json)
    raise typer.Exit(int(ExitCode.OK))


def _regions(
    user, model, args, kwargs, device: str, top: int, tasks: int, out: Path | None, as_json: bool, dtype: str | None
) -> str:
    """Rank the fusion regions and exit; where the model cannot be captured as a graph, return the sentence that says
    so (its modules are ranked instead)."""
    from cudagent.settings import Settings
    from cudagent.usermodel.fusion import region_report, region_tasks

    try:
        report = region_report(model.eval(), tuple(args), kwargs, device, user.name)
    except Exception as exc:  # noqa: BLE001  (torch.export's refusal of this model)
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        return f"{user.name} could not be captured as a graph (torch.export: {first}); ranking its modules instead"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    directory = out or Settings.from_env().home / "hotspots" / f"{_stem(user.name)}-regions-{stamp}"
    directory.mkdir(parents=True, exist_ok=True)
    tried = region_tasks(report, tasks, directory / "tasks", device) if tasks else []
    record = {**report.to_dict(), "inputs": user.inputs.text(dtype), "built": user.source, "notes": user.notes}
    (directory / "regions.json").write_text(json.dumps(record, indent=2) + "\n")
    rows = report.table(top)
    (directory / "regions.md").write_text(report.markdown(top))
    if as_json:
        typer.echo(json.dumps({**record, "directory": str(directory)}))
    else:
        from cudagent.cli.output import print_table

        title = f"fusion regions of {user.name} on {device} ({report.dtype}, {user.inputs.text(dtype)})"
        print_table(rows, title, optional=("rounds", "operators", "ms/call", "alike", "fusion saves"))
        for note in [*user.notes, *([report.note] if report.note else [])]:
            typer.echo(f"note: {note}", err=True)
        for k in tried:
            said = f"task {k.task}" if k.task else f"no task: {k.reason}"
            typer.echo(f"region {k.first.name} ({100 * k.share:.1f}%): {said}", err=True)
        typer.echo(f"written to {directory}", err=True)
    _tasks_written([k.task for k in tried if k.task], tasks, directory, len(tried), as_json)
    raise typer.Exit(int(ExitCode.OK))


def _tasks_written(written: list[str], asked: int, directory: Path, tried: int, as_json: bool) -> None:
    """Say how many task files --tasks wrote; none of what was asked is an error (exit 2), after the table."""
    from cudagent.errors import CudagentError
    from cudagent.text import counted

    if not asked:
        return
    if not written:
        raise CudagentError(
            f"--tasks {asked}: none of the {counted(tried, 'spot')} tried could become a task (each says why above), "
            "so no task was written"
        )
    if not as_json:
        short = f", fewer than the {asked} asked: no other spot could become one" if len(written) < asked else ""
        typer.echo(f"wrote {counted(len(written), 'task')} in {directory / 'tasks'}{short}", err=True)


def _print(found, user, top: int, directory: Path, dtype: str | None) -> None:
    from cudagent.cli.output import print_table

    title = f"{user.name} on {found.device}: {found.wall_ms:.3f} ms a call ({user.inputs.text(dtype)})"
    print_table(found.table(top), title, optional=("kind", "shapes", "calls", "dtypes"))
    for note in user.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"saved in {directory}", err=True)


def _stem(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name).strip("-").lower()
