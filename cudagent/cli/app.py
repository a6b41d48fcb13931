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


def _help_layout() -> None:
    """Help written to a pipe or a file (no terminal) is rendered 160 columns wide (unless $COLUMNS says a width):
    at rich's 80 a panel cut an environment variable's name to `$CUDAGENT_EVALUATO…`. At any width an option's help
    folds a word too long for its column. Only when help is asked for (rich is imported for it)."""
    import os
    import sys

    if not ({"--help", "-h"} & set(sys.argv) or len(sys.argv) <= 1):
        return
    import typer.rich_utils

    _fold_option_help(typer.rich_utils)
    if not sys.stdout.isatty() and typer.rich_utils.MAX_WIDTH is None and not os.environ.get("COLUMNS"):
        typer.rich_utils.MAX_WIDTH = 160


class _Folded:
    """An option's help whose words longer than its column are folded onto the next line, not cut with an ellipsis
    (an 80-column terminal leaves the help column about 20 wide: `$CUDAGENT_EVALUATOR_TOKEN` would lose its end)."""

    def __init__(self, inner):
        self.inner = inner

    def __rich_console__(self, console, options):
        yield from console.render(self.inner, options.update(overflow="fold"))

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        return Measurement.get(console, options, self.inner)


def _fold_option_help(rich_utils) -> None:
    original = getattr(rich_utils, "_get_parameter_help", None)
    if original is None or getattr(original, "folded", False):
        return

    def folded(*args, **kwargs):
        help = original(*args, **kwargs)  # rich Columns: its cells crop with an ellipsis whatever the options say
        parts = getattr(help, "renderables", None)
        if parts is None:
            return _Folded(help)
        from rich.console import Group

        return _Folded(Group(*parts))

    folded.folded = True
    rich_utils._get_parameter_help = folded


_help_layout()

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
