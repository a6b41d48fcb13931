"""Where tables are printed: a terminal's own width, or, when the output is a pipe or a file, wide enough that no
table splits a word or an environment variable's name (rich would assume 80 columns)."""

from __future__ import annotations

import sys

PLAIN_WIDTH = 160


def console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(file=stream, width=None if stream.isatty() else PLAIN_WIDTH)
