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


def _plain_help_width() -> None:
    """Help written to a pipe or a file (no terminal) is rendered 160 columns wide: at rich's 80 a panel cuts an
    environment variable's name to `$CUDAGENT_EVALUATO…`. Only when help is asked for (rich is imported for it)."""
    import sys

    if sys.stdout.isatty() or not ({"--help", "-h"} & set(sys.argv) or len(sys.argv) <= 1):
        return
    import typer.rich_utils

    if typer.rich_utils.MAX_WIDTH is None:
        typer.rich_utils.MAX_WIDTH = 160


_plain_help_width()

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
