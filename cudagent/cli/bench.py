"""`cudagent bench`: score many tasks (a KernelBench checkout, or any folder of task files)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import typer

from cudagent.cli.app import app
from cudagent.cli.options import confine_option, device_option, evaluator_urls
from cudagent.cli.progress import TaskProgress
from cudagent.errors import CudagentError, EnvironmentProblem, ExitCode

SELECT_PANEL = "Tasks"
AGENT_PANEL = "Agent runs (without --solutions)"


@app.command(
    epilog="Examples:\n\n"
    "  cudagent bench examples/tasks --solutions examples/solutions/cuda\n\n"
    "  cudagent bench ~/KernelBench --level 1 --select '*ReLU*' --solutions runs/level1 --gpus 0,1 --json\n\n"
    "  cudagent bench ~/KernelBench --level 2 --model my-model --max-turns 60 --out bench-l2 --resume\n\n"
    "  cudagent bench ~/KernelBench --level 1 --solutions runs/level1 --evaluator http://gpu-host:8765\n\n"
    "Exit codes: 0 the bench ran (whatever it found); 2 bad folder, selection or options; 3 environment problem "
    "(no GPU for --device cuda, Ray missing for --ray)."
)
def bench(
    tasks_dir: Path = typer.Argument(..., help="A KernelBench checkout (level1/, level2/, ...) or a folder of tasks."),
    solutions: Path = typer.Option(
        None,
        help="Score existing candidates: DIR/TASK/ (a workspace) or "
        "DIR/TASK.py (one model_new.py, KernelBench's own format too).",
    ),
    level: str = typer.Option(None, help="Levels to run, e.g. 1 or 1,2.", rich_help_panel=SELECT_PANEL),
    select: str = typer.Option(None, help="A glob on task names (or level/name).", rich_help_panel=SELECT_PANEL),
    list_file: Path = typer.Option(
        None, "--list", help="A file naming the tasks to run, one per line.", rich_help_panel=SELECT_PANEL
    ),
    device: str = device_option("GPUs (CUDA kernels) or the CPU (C++ kernels)."),
    confine: str = confine_option(),
    gpus: str = typer.Option(None, help="GPU ids to use, one worker each, e.g. 0,1 (default: all)."),
    timeout: float = typer.Option(1800.0, help="Seconds one task may take before it counts as failed."),
    out: Path = typer.Option(
        None,
        help="Where results.jsonl and the report go (default: bench/<folder name> in cudagent's home, where --resume "
        "finds it again).",
        show_default=False,
    ),
    resume: bool = typer.Option(False, "--resume", help="Keep the results already in OUT and run the rest."),
    ray: str = typer.Option(None, help="Run the workers as Ray tasks on this cluster (`local` starts one here)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON line per finished task, then a summary object."),
    model: str = typer.Option(None, help="Model for agent runs.", rich_help_panel=AGENT_PANEL),
    base_url: str = typer.Option(None, help="Endpoint for agent runs.", rich_help_panel=AGENT_PANEL),
    max_turns: int = typer.Option(None, help="Turns per agent run.", rich_help_panel=AGENT_PANEL),
    missing_as_failed: bool = typer.Option(
        False, "--missing-as-failed", help="Count a task without a solution as failed instead of skipping it."
    ),
    evaluator: list[str] = typer.Option(
        None,
        envvar="CUDAGENT_EVALUATOR_URL",
        help="Evaluate on `cudagent serve` services (repeat for a pool; token: $CUDAGENT_EVALUATOR_TOKEN) instead "
        "of this machine's GPUs.",
        show_default=False,
    ),
    jobs: int = typer.Option(
        None, help="Tasks at once with --evaluator (default: twice the services' GPUs).", show_default=False
    ),
    per_gpu: int = typer.Option(
        1,
        "--per-gpu",
        help="Tasks at once on each GPU: they share it for inputs, builds, trials and compiling, and each times "
        "alone (a task that runs out of memory beside others runs again alone).",
    ),
    stop_after: float = typer.Option(
        None,
        "--stop-after",
        help="Start no task after this many seconds; those running finish (run the rest later with --resume).",
        show_default=False,
    ),
    baselines_only: bool = typer.Option(
        False,
        "--baselines-only",
        help="Time the references only (eager and torch.compile, cached for later evaluations) after the "
        "null-candidate check: no candidate, no agent run.",
    ),
) -> None:
    """Score many tasks: pass rate, fast_1 and fast_1.05 against eager and torch.compile, geomean speedups, per
    level and overall, with degenerate tasks flagged; writes report.json, report.md and speedups.png to OUT."""
    from cudagent.bench.report import build_report, table_rows, write_report
    from cudagent.bench.runner import Bench, BenchConfig
    from cudagent.bench.tasks import discover
    from cudagent.device.info import resolve_device

    if solutions is not None and not solutions.is_dir():
        raise CudagentError(f"the solutions folder {solutions} does not exist")
    if timeout <= 0:
        raise typer.BadParameter("must be positive", param_hint="--timeout")
    if per_gpu <= 0:
        raise typer.BadParameter("must be positive", param_hint="--per-gpu")
    if stop_after is not None and stop_after <= 0:
        raise typer.BadParameter("must be positive", param_hint="--stop-after")
    if baselines_only and solutions is not None:
        raise CudagentError("--baselines-only times the references alone; leave out --solutions (or --baselines-only)")
    levels = [x.strip() for x in level.split(",")] if level else None
    tasks = discover(tasks_dir, levels, select, list_file)
    if out is None:
        from cudagent.settings import Settings

        out = Settings.from_env().home / "bench" / tasks_dir.resolve().name
    urls = evaluator_urls(",".join(evaluator or []))
    if urls:
        dev, slots = _remote(urls, jobs, gpus)
    else:
        if jobs is not None:
            raise CudagentError("--jobs is for --evaluator; on this machine the bench runs one task per GPU")
        dev = resolve_device(device)
        slots = _slots(dev, gpus)
    optimize = None
    if solutions is None and not baselines_only:
        optimize = {k: v for k, v in {"model": model, "base_url": base_url}.items() if v}
        optimize["limits"] = {"max_turns": max_turns} if max_turns else {}

    config = BenchConfig(out, dev.kind, slots, timeout, solutions, optimize, resume, ray, missing_as_failed, urls)
    config.per_gpu, config.baselines_only, config.stop_after_s = per_gpu, baselines_only, stop_after
    runner = Bench(config)
    pending = runner.pending(tasks)
    progress = TaskProgress(len(pending) - len(runner.unsolved(pending)), enabled=not as_json and sys.stderr.isatty())

    def show(row: dict) -> None:
        if as_json:
            typer.echo(json.dumps({"event": "task", **row}, default=str))
        progress.done(task_line(row), counts=not row.get("skipped"))

    runner.on_result = show
    started = time.time()
    with progress:
        rows = runner.run(tasks)
    invocations = record_invocation(out, started, runner.recorded)
    meta = {
        "source": str(tasks_dir),
        "device_name": dev.name,
        "driver": dev.driver,
        "torch": dev.torch_version,
        "cuda": dev.cuda_version,
        "sizes": _sizes(tasks_dir, tasks),
        "gpus": slots if not urls else f"{len(slots)} tasks at once on {', '.join(urls)}",
        "mode": "baselines only"
        if baselines_only
        else f"solutions {solutions}"
        if solutions
        else f"optimize ({optimize})",
        "per_gpu": per_gpu,
        "invocations": invocations,
        "wall_s": round(sum(i["wall_s"] for i in invocations), 1),
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


def _remote(urls: list[str], jobs: int | None, gpus: str | None):
    """The services' device (for the report) and the concurrent task slots; a service that does not answer, or
    answers with an error, fails here at once."""
    import asyncio

    from cudagent.device.info import DeviceInfo
    from cudagent.evaluator.where import evaluators

    if gpus:
        raise CudagentError("--gpus is for this machine's GPUs; with --evaluator the service chooses (its --gpus)")
    if jobs is not None and jobs <= 0:
        raise typer.BadParameter("must be positive", param_hint="--jobs")
    pool = evaluators(urls)
    infos = [asyncio.run(pool.info(u)) for u in pool.urls]
    workers = [w for info in infos for w in info["workers"]]
    device = next((w["device"] for w in workers if w.get("device")), None)
    if device is None:
        raise EnvironmentProblem(f"no evaluator worker is up at {', '.join(pool.urls)}; try again in a minute")
    device["capability"] = tuple(device["capability"]) if device.get("capability") else None
    return DeviceInfo(**device), [None] * (jobs or 2 * len(workers))


def record_invocation(out: Path, started: float, tasks: int) -> list[dict]:
    """Append this invocation (start, wall time, tasks it ran) to OUT/invocations.jsonl; return all of them (a bench
    run in resumed slices adds up its slices)."""
    from cudagent.bench.runner import INVOCATIONS

    path = out / INVOCATIONS
    row = {"started": started, "wall_s": round(time.time() - started, 1), "tasks": tasks}
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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
    # Only a checkout of its own: a folder inside some other repository (a copy of KernelBench's levels carried
    # into a project, say) must not report that repository's commit.
    top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    own = top.returncode == 0 and Path(top.stdout.strip()).resolve() == root.expanduser().resolve()
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    where = f"git {commit.stdout.strip()}, " if own and commit.returncode == 0 and commit.stdout.strip() else ""
    return f"{where}{len(tasks)} files, sha256 {digest.hexdigest()[:16]}"


def _print_table(report: dict, rows) -> None:
    """The summary table on stdout: a column per figure where the terminal is wide enough, else a row per figure
    (nothing cut, no word broken)."""
    from rich import box
    from rich.table import Table

    from cudagent.bench.report import COLUMNS, cell
    from cudagent.cli.output import console as plain_console

    console = plain_console()
    title = f"cudagent bench ({report['device_name']})"
    wide = Table(title=title, box=box.SIMPLE_HEAD)
    wide.add_column("", no_wrap=True)
    for _, name, _ in COLUMNS:
        words = name.replace(" (", "\n(")
        wide.add_column(words, justify="right", min_width=max(len(w) for w in words.split()))
    for label, s in rows:
        wide.add_row(label, *[cell(s.get(k), kind) for k, _, kind in COLUMNS])
    if console.measure(wide, options=console.options.update_width(10_000)).maximum <= console.width:
        console.print(wide)
        return
    tall = Table(title=title, box=box.SIMPLE_HEAD)
    tall.add_column("", no_wrap=True)
    for label, _ in rows:
        tall.add_column(label, justify="right", no_wrap=True)
    for key, name, kind in COLUMNS:
        tall.add_row(name, *[cell(s.get(key), kind) for _, s in rows])
    console.print(tall)


def task_line(row: dict) -> str:
    """One line for a finished task: its name (with its level where there are levels), outcome and why."""
    from cudagent.bench.report import shorten

    name = row["name"] if row.get("level") in (None, "-") else row["key"]
    if row.get("skipped"):
        return f"{name}: skipped ({row['skipped']})"
    wall = f" in {row['process_s']:.0f} s" if row.get("process_s") else ""
    if row.get("baselines_only") and not row.get("error"):
        t = row.get("time_ms") or {}
        compiled = f"{t['compile']:.4f} ms" if t.get("compile") is not None else "-"
        return f"{name}: eager {t.get('eager'):.4f} ms, torch.compile {compiled}{wall}"
    status = "correct" if row.get("correct") else "failed"
    speed = f", {row['speedup_vs_compile']:.2f}x vs compile" if row.get("speedup_vs_compile") else ""
    why = (
        f": {shorten((row.get('error') or '').splitlines()[0], 100)}"
        if not row.get("correct") and row.get("error")
        else ""
    )
    tier = f", tier {row.get('tier')}" if row.get("tier") is not None else ""
    return f"{name}: {status}{tier}{speed}{why}"
