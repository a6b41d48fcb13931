"""`cudagent bench`: score many tasks (a KernelBench checkout, or any folder of task files)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import typer

from cudagent.cli.app import app
from cudagent.cli.check import DeviceChoice
from cudagent.errors import CudagentError, ExitCode

SELECT_PANEL = "Tasks"
AGENT_PANEL = "Agent runs (without --solutions)"


@app.command(
    epilog="Examples:\n\n"
    "  cudagent bench examples/tasks --solutions examples/solutions/cuda\n\n"
    "  cudagent bench ~/KernelBench --level 1 --select '*ReLU*' --solutions runs/level1 --gpus 0,1 --json\n\n"
    "  cudagent bench ~/KernelBench --level 2 --model my-model --max-turns 60 --out bench-l2 --resume\n\n"
    "Exit codes: 0 the bench ran (whatever it found); 2 bad folder, selection or options; 3 environment problem "
    "(no GPU for --device cuda, Ray missing for --ray)."
)
def bench(
    tasks_dir: Path = typer.Argument(..., help="A KernelBench checkout (level1/, level2/, ...) or a folder of tasks."),
    solutions: Path = typer.Option(
        None,
        help="Score existing candidates: DIR/<task>/ (a workspace) or "
        "DIR/<task>.py (one model_new.py, KernelBench's own format too).",
    ),
    level: str = typer.Option(None, help="Levels to run, e.g. 1 or 1,2.", rich_help_panel=SELECT_PANEL),
    select: str = typer.Option(None, help="A glob on task names (or level/name).", rich_help_panel=SELECT_PANEL),
    list_file: Path = typer.Option(
        None, "--list", help="A file naming the tasks to run, one per line.", rich_help_panel=SELECT_PANEL
    ),
    device: DeviceChoice = typer.Option(DeviceChoice.auto, help="GPUs (CUDA kernels) or the CPU (C++ kernels)."),
    gpus: str = typer.Option(None, help="GPU ids to use, one worker each, e.g. 0,1 (default: all)."),
    timeout: float = typer.Option(1800.0, help="Seconds one task may take before it counts as failed."),
    out: Path = typer.Option(Path("bench-out"), help="Where results.jsonl and the report go."),
    resume: bool = typer.Option(False, "--resume", help="Keep the results already in OUT and run the rest."),
    ray: str = typer.Option(None, help="Run the workers as Ray tasks on this cluster (`local` starts one here)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON line per finished task, then a summary object."),
    model: str = typer.Option(None, help="Model for agent runs.", rich_help_panel=AGENT_PANEL),
    base_url: str = typer.Option(None, help="Endpoint for agent runs.", rich_help_panel=AGENT_PANEL),
    max_turns: int = typer.Option(None, help="Turns per agent run.", rich_help_panel=AGENT_PANEL),
) -> None:
    """Score many tasks: pass rate, fast_1 and fast_1.05 against eager and torch.compile, geomean speedups, per
    level and overall, with degenerate tasks flagged; writes report.json, report.md and speedups.png to OUT."""
    from cudagent.bench.report import build_report, table_rows, write_report
    from cudagent.bench.runner import Bench, BenchConfig
    from cudagent.bench.tasks import discover
    from cudagent.hardware import resolve_device

    if solutions is not None and not solutions.is_dir():
        raise CudagentError(f"the solutions folder {solutions} does not exist")
    if timeout <= 0:
        raise typer.BadParameter("must be positive", param_hint="--timeout")
    levels = [x.strip() for x in level.split(",")] if level else None
    tasks = discover(tasks_dir, levels, select, list_file)
    dev = resolve_device(device.value)
    slots = _slots(dev, gpus)
    optimize = None
    if solutions is None:
        optimize = {k: v for k, v in {"model": model, "base_url": base_url}.items() if v}
        optimize["limits"] = {"max_turns": max_turns} if max_turns else {}

    def show(row: dict) -> None:
        if as_json:
            typer.echo(json.dumps({"event": "task", **row}, default=str))
        status = "correct" if row.get("correct") else "failed"
        speed = f", {row['speedup_vs_compile']:.2f}x vs compile" if row.get("speedup_vs_compile") else ""
        why = (
            ""
            if row.get("correct")
            else f": {(row.get('error') or '').splitlines()[0][:100]}"
            if row.get("error")
            else ""
        )
        typer.echo(f"{row['key']}: {status}, tier {row.get('tier')}{speed}{why}", err=True)

    config = BenchConfig(out, dev.kind, slots, timeout, solutions, optimize, resume, ray)
    rows = Bench(config, show).run(tasks)
    meta = {
        "source": str(tasks_dir),
        "device_name": dev.name,
        "driver": dev.driver,
        "torch": dev.torch_version,
        "cuda": dev.cuda_version,
        "sizes": _sizes(tasks_dir, tasks),
        "gpus": slots,
        "mode": f"solutions {solutions}" if solutions else f"optimize ({optimize})",
    }
    report = build_report(rows, meta)
    paths = write_report(report, out)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "event": "summary",
                    **{k: v for k, v in report.items() if k != "results"},
                    "files": {k: str(p) for k, p in paths.items()},
                },
                default=str,
            )
        )
    else:
        _print_table(report, table_rows(report))
        typer.echo(f"report: {paths['markdown']}, {paths['json']}, {paths['png']}", err=True)
    raise typer.Exit(int(ExitCode.OK))


def _slots(dev, gpus: str | None) -> list[str | None]:
    if not dev.is_cuda:
        if gpus:
            raise CudagentError("--gpus needs a CUDA device; the CPU bench runs one task at a time")
        return [None]
    import torch

    count = torch.cuda.device_count()
    if not gpus:
        return [str(i) for i in range(count)]
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    bad = [g for g in ids if not g.isdigit() or int(g) >= count]
    if bad:
        raise CudagentError(f"no GPU {', '.join(bad)} here; this machine has GPUs 0 to {count - 1}")
    return ids


def _sizes(root: Path, tasks) -> str:
    """Which problem sizes were used: the checkout's commit when it is a git repository, and a digest of the files."""
    digest = hashlib.sha256()
    for t in tasks:
        digest.update(t.key.encode() + t.path.read_bytes())
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    where = f"git {commit.stdout.strip()}, " if commit.returncode == 0 and commit.stdout.strip() else ""
    return f"{where}{len(tasks)} files, sha256 {digest.hexdigest()[:16]}"


def _print_table(report: dict, rows) -> None:
    from rich.console import Console
    from rich.table import Table

    from cudagent.bench.report import COLUMNS, cell

    table = Table(title=f"cudagent bench ({report['device_name']})")
    table.add_column("")
    for _, title, _ in COLUMNS:
        table.add_column(title, justify="right")
    for label, s in rows:
        table.add_row(label, *[cell(s.get(k), kind) for k, _, kind in COLUMNS])
    Console(file=sys.stdout, width=None if sys.stdout.isatty() else 170).print(table)
