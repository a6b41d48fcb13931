"""`cudagent check TASK CANDIDATE`: build, audit, verify and time a candidate; print its verdict."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer

from cudagent.cli import app
from cudagent.errors import ExitCode


class DeviceChoice(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


@app.command(
    epilog="Examples:\n\n"
    "  cudagent check examples/tasks/axpby.py examples/solutions/cuda/axpby\n\n"
    "  cudagent check examples/tasks/softmax.py examples/solutions/cpu/softmax --device cpu --json\n\n"
    "Exit codes: 0 correct, 1 rejected (incorrect, a violation, a build failure, a crash or a hang), "
    "2 bad task or candidate path, 3 environment problem (no GPU for --device cuda, no compiler).",
)
def check(
    task: Path = typer.Argument(
        ..., help="The task file: a KernelBench-style module defining Model, get_inputs and get_init_inputs."
    ),
    candidate: Path = typer.Argument(
        ...,
        help="A workspace directory holding model_new.py (and kernels/), or a "
        "model_new.py file (KernelBench's single-file format is accepted).",
    ),
    device: DeviceChoice = typer.Option(
        DeviceChoice.auto, help="Where to evaluate: the GPU (CUDA kernels) or the CPU (C++ kernels)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object on stdout."),
    atol: float = typer.Option(None, help="Absolute tolerance for all outputs (default: by dtype, 1e-2 for fp32)."),
    rtol: float = typer.Option(None, help="Relative tolerance for all outputs (default: by dtype, 1e-2 for fp32)."),
    timing: bool = typer.Option(
        True,
        "--timing/--no-timing",
        help="Time the candidate and the baselines to decide the tier (without: tier 1 at most).",
    ),
    compile_mode: str = typer.Option(
        "default", help="torch.compile mode of the baseline: default, max-autotune or reduce-overhead."
    ),
    margin: float = typer.Option(0.05, help="How much faster than both baselines tier 3 needs (0.05 = 5%)."),
    call_timeout: float = typer.Option(120.0, help="Seconds one forward call may take before it counts as a hang."),
    build_timeout: float = typer.Option(600.0, help="Seconds the build may take."),
) -> None:
    """Build, audit, verify and time a candidate against its task; print the verdict."""
    from cudagent.evaluator import EvalOptions, Evaluator, Tolerance
    from cudagent.hardware import resolve_device
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for

    if compile_mode not in ("default", "max-autotune", "reduce-overhead"):
        raise typer.BadParameter("use default, max-autotune or reduce-overhead", param_hint="--compile-mode")
    the_task = load_task(task)
    cand = resolve_candidate(candidate)
    dev = resolve_device(device.value)
    options = EvalOptions(
        tolerance=Tolerance(atol, rtol),
        timing=timing,
        compile_mode=compile_mode,
        margin=margin,
        call_timeout_s=call_timeout,
        build_timeout_s=build_timeout,
    )
    evaluator = Evaluator(the_task, dev, options)
    ws = workspace_for(cand, the_task.source)
    verdict = evaluator.evaluate(ws)
    if as_json:
        typer.echo(json.dumps(verdict.to_dict(), indent=None, default=str))
    else:
        typer.echo(verdict.summary())
    raise typer.Exit(int(ExitCode.OK if verdict.correct else ExitCode.REJECTED))
