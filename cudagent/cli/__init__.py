"""The `cudagent` command line. Commands import torch and the evaluator lazily, so `cudagent --help` is instant.

Human-facing text goes to stderr, results to stdout; every command ends with a documented exit code
(cudagent.errors.ExitCode).
"""

from __future__ import annotations

import sys
import warnings

import typer

from cudagent import __version__
from cudagent.errors import CudagentError, ExitCode

app = typer.Typer(
    name="cudagent",
    help="Make PyTorch modules faster with custom CUDA kernels, judged by a trusted evaluator.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cudagent {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Exit codes: 0 ok, 1 candidate rejected, 2 bad input, 3 environment problem (no GPU, no compiler), 130
    interrupted."""


from cudagent.cli import bench as _bench  # noqa: E402
from cudagent.cli import check as _check  # noqa: E402  (each module registers its commands on `app`)
from cudagent.cli import optimize as _optimize  # noqa: E402
from cudagent.cli import review as _review  # noqa: E402

del _check, _optimize, _review, _bench


def main() -> None:
    # torch warns on import when NumPy is absent; cudagent does not need NumPy, and the warning would come before
    # every message a user reads.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        app()
    except CudagentError as exc:
        typer.echo(f"cudagent: {exc.message}", err=True)
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        typer.echo("cudagent: interrupted", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
