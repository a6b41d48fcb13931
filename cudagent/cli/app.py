"""The Typer application every command module registers its commands on."""

from __future__ import annotations

import typer

from cudagent import __version__

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
