"""The Typer application every command module registers its commands on."""

from __future__ import annotations

import typer
import typer.core

from cudagent import __version__


def _flag_type(original):
    """Typer shows `<bool>` beside every flag (even --help): a flag takes no value, so show no type."""

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else original(self, ctx)

    return display_type_rich


if hasattr(typer.core.TyperOption, "display_type_rich"):  # typer 0.20 and later; older ones show no metavar there
    typer.core.TyperOption.display_type_rich = _flag_type(typer.core.TyperOption.display_type_rich)

app = typer.Typer(
    name="cudagent",
    help="Make PyTorch modules faster with custom CUDA kernels, judged by a trusted evaluator.",
    no_args_is_help=True,
    add_completion=False,
    # markdown: docstrings wrapped in the source read as whole sentences, not lines broken mid-sentence
    rich_markup_mode="markdown",
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
