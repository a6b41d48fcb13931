"""`cudagent check` and `cudagent profile`: build, audit, verify and time a candidate; print its verdict.

Both run the same evaluation; `profile` prints the full hardware feedback (roofline, kernel breakdowns, the
interleaved confirmation, optionally Nsight Compute) where `check` prints a few lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from cudagent.cli.app import app
from cudagent.cli.options import confine_option, device_option, evaluator_urls
from cudagent.errors import ExitCode

EXIT_CODES = (
    "Exit codes: 0 correct, 1 rejected (incorrect, a violation, a build failure, a crash or a hang), "
    "2 bad task or candidate path, 3 environment problem (no GPU for --device cuda, no compiler)."
)
TASK_ARG = typer.Argument(
    ..., help="The task file: a KernelBench-style module defining Model, get_inputs and get_init_inputs."
)
CANDIDATE_ARG = typer.Argument(
    ...,
    help="A workspace directory holding model_new.py (and kernels/), or a "
    "model_new.py file (KernelBench's single-file format is accepted).",
)
CONFINE_OPT = confine_option()
DEVICE_OPT = device_option("Where to evaluate: the GPU (CUDA kernels) or the CPU (C++ kernels).")
JSON_OPT = typer.Option(False, "--json", help="Print exactly one JSON object on stdout.")
ATOL_OPT = typer.Option(None, help="Absolute tolerance for all outputs (default: by dtype, 1e-2 for fp32).")
RTOL_OPT = typer.Option(None, help="Relative tolerance for all outputs (default: by dtype, 1e-2 for fp32).")
COMPILE_OPT = typer.Option(
    "default", help="torch.compile mode of the baseline: default, max-autotune or reduce-overhead."
)
MARGIN_OPT = typer.Option(0.05, help="How much faster than both baselines tier 3 needs (0.05 = 5%).")
CALL_TIMEOUT_OPT = typer.Option(120.0, help="Seconds one forward call may take before it counts as a hang.")
BUILD_TIMEOUT_OPT = typer.Option(600.0, help="Seconds the build may take.")
EVALUATOR_OPT = typer.Option(
    None,
    envvar="CUDAGENT_EVALUATOR_URL",
    help="Evaluate on a `cudagent serve` service (URLs, comma-separated; token: $CUDAGENT_EVALUATOR_TOKEN) with "
    "its settings, instead of this machine.",
)


@app.command(
    epilog="Examples:\n\n"
    "  cudagent check examples/tasks/axpby.py examples/solutions/cuda/axpby\n\n"
    "  cudagent check examples/tasks/softmax.py examples/solutions/cpu/softmax --device cpu --json\n\n" + EXIT_CODES
)
def check(
    task: Path = TASK_ARG,
    candidate: Path = CANDIDATE_ARG,
    device: str = DEVICE_OPT,
    confine: str = CONFINE_OPT,
    as_json: bool = JSON_OPT,
    atol: float = ATOL_OPT,
    rtol: float = RTOL_OPT,
    timing: bool = typer.Option(
        True,
        "--timing/--no-timing",
        help="Time the candidate and the baselines to decide the tier (without: tier 1 at most).",
    ),
    compile_mode: str = COMPILE_OPT,
    margin: float = MARGIN_OPT,
    call_timeout: float = CALL_TIMEOUT_OPT,
    build_timeout: float = BUILD_TIMEOUT_OPT,
    evaluator: str = EVALUATOR_OPT,
) -> None:
    """Build, audit, verify and time a candidate against its task; print the verdict."""
    _run(
        task,
        candidate,
        device,
        as_json,
        atol,
        rtol,
        timing,
        compile_mode,
        margin,
        call_timeout,
        build_timeout,
        ncu=False,
        detail=False,
        evaluator=evaluator,
    )


@app.command(
    epilog="Examples:\n\n"
    "  cudagent profile examples/tasks/softmax.py examples/solutions/cuda/softmax\n\n"
    "  cudagent profile examples/tasks/mlp_block.py examples/solutions/cuda/mlp_block --ncu --json\n\n" + EXIT_CODES
)
def profile(
    task: Path = TASK_ARG,
    candidate: Path = CANDIDATE_ARG,
    device: str = DEVICE_OPT,
    confine: str = CONFINE_OPT,
    as_json: bool = JSON_OPT,
    ncu: bool = typer.Option(
        False,
        "--ncu",
        help="Add an Nsight Compute summary of the candidate's kernels (occupancy, throughput, top stall reasons).",
    ),
    atol: float = ATOL_OPT,
    rtol: float = RTOL_OPT,
    compile_mode: str = COMPILE_OPT,
    margin: float = MARGIN_OPT,
    call_timeout: float = CALL_TIMEOUT_OPT,
    build_timeout: float = BUILD_TIMEOUT_OPT,
    evaluator: str = EVALUATOR_OPT,
) -> None:
    """Verify and time a candidate, and show where its time goes: per-target statistics, the roofline against the
    device's measured peaks, the kernel breakdown of the candidate and of torch.compile."""
    _run(
        task,
        candidate,
        device,
        as_json,
        atol,
        rtol,
        True,
        compile_mode,
        margin,
        call_timeout,
        build_timeout,
        ncu=ncu,
        detail=True,
        evaluator=evaluator,
    )


def _run(
    task,
    candidate,
    device,
    as_json,
    atol,
    rtol,
    timing,
    compile_mode,
    margin,
    call_timeout,
    build_timeout,
    ncu: bool,
    detail: bool,
    evaluator: str | None = None,
) -> None:
    import asyncio

    from cudagent.errors import CudagentError

    # the paths first: a mistyped one is one sentence before torch and the evaluator are imported (seconds)
    if not Path(task).is_file():
        raise CudagentError(f"the task file {task} does not exist; give the path of a KernelBench-style .py")
    if not Path(candidate).exists():
        raise CudagentError(
            f"the candidate {candidate} does not exist; give a workspace directory or a model_new.py file"
        )
    from cudagent.evaluator.audit.sources import audited
    from cudagent.evaluator.compare import Tolerance
    from cudagent.evaluator.evaluator import EvalOptions
    from cudagent.evaluator.port import snapshot_of
    from cudagent.evaluator.where import evaluators
    from cudagent.settings import Settings
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for

    if compile_mode not in ("default", "max-autotune", "reduce-overhead"):
        raise typer.BadParameter("use default, max-autotune or reduce-overhead", param_hint="--compile-mode")
    urls = evaluator_urls(evaluator)
    options = EvalOptions.from_settings(
        Settings.from_env(),
        tolerance=Tolerance(atol, rtol),
        timing=timing,
        compile_mode=compile_mode,
        margin=margin,
        call_timeout_s=call_timeout,
        build_timeout_s=build_timeout,
        ncu=ncu,
    )
    if urls:
        changed = _changed_settings(options)
        if changed:
            raise CudagentError(
                f"{', '.join(changed)} cannot be used with --evaluator: the service evaluates with its own settings"
            )
    the_task = load_task(task)
    ws = workspace_for(resolve_candidate(candidate), the_task.source)
    where = evaluators(urls, device=device, options=options)
    if not urls:  # the static audit first, here: a candidate it rejects is judged before any process starts
        early = audited(the_task, where.device_info, ws)
        if early.violations:
            _report(early, as_json, detail)
    snapshot = snapshot_of(ws)

    async def judge():
        port = where.port(the_task)
        await port.open(fail_fast=True)
        try:
            return await port.evaluate(snapshot, timing=timing)
        finally:
            await port.close()

    with _status(enabled=not urls, spinner=not as_json and sys.stderr.isatty()) as status:
        options.on_phase = status
        verdict = asyncio.run(judge())
    _report(verdict, as_json, detail)


def _report(verdict, as_json: bool, detail: bool):
    """Print the verdict (one JSON object, or text) and end with its exit code."""
    typer.echo(json.dumps(verdict.to_dict(), default=str) if as_json else verdict.summary(detail=detail))
    raise typer.Exit(int(ExitCode.OK if verdict.correct else ExitCode.REJECTED))


def _changed_settings(options) -> list[str]:
    """The evaluation settings given on the command line that differ from the defaults (a service uses its own)."""
    from cudagent.evaluator.compare import Tolerance
    from cudagent.evaluator.evaluator import EvalOptions

    default = EvalOptions()
    changed = []
    if options.tolerance != Tolerance():
        changed.append("--atol/--rtol")
    for flag, field in (("--compile-mode", "compile_mode"), ("--margin", "margin"), ("--ncu", "ncu")):
        if getattr(options, field) != getattr(default, field):
            changed.append(flag)
    for flag, field in (("--call-timeout", "call_timeout_s"), ("--build-timeout", "build_timeout_s")):
        if getattr(options, field) != getattr(default, field):
            changed.append(flag)
    return changed


class _status:
    """The evaluation's current phase and the time spent so far, on stderr: a spinner on a terminal, one line per
    phase in a plain log (a pipe, a file, CI), so that no wait is silent."""

    def __init__(self, enabled: bool, spinner: bool = True):
        self.enabled, self.spinner, self._status, self._start = enabled, spinner, None, 0.0

    def __enter__(self):
        import time

        self._start = time.monotonic()
        if self.enabled and self.spinner:
            from rich.console import Console

            self._status = Console(stderr=True).status("starting")
            self._status.start()
        return self

    def __call__(self, phase: str) -> None:
        import time

        so_far = f"{phase} ({time.monotonic() - self._start:.0f} s so far)"
        if self._status is not None:
            self._status.update(so_far)
        elif self.enabled:
            sys.stderr.write(f"cudagent: {so_far}\n")
            sys.stderr.flush()

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.stop()
