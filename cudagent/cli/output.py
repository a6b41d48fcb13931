"""Where tables are printed: a terminal's own width, or, when the output is a pipe or a file, wide enough that no
table splits a word or an environment variable's name (rich would assume 80 columns). $COLUMNS, where set, is the
width either way.

A table is printed so that no word of it is split: where the width cannot hold every column's longest word, the
columns a table names as optional are left out (the last named first) and one line on stderr says which."""

from __future__ import annotations

import os
import sys

from cudagent.boundary.terminal import shown as as_text

PLAIN_WIDTH = 160


def console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(file=stream, width=_width(stream))


def _width(stream) -> int | None:
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) >= 20:
        return int(columns)
    return None if stream.isatty() else PLAIN_WIDTH


def print_table(rows: list[list], title: str | None = None, optional: tuple[str, ...] = ()) -> None:
    """Print `rows` (the first is the header) on stdout. A cell is text as written (a spot or run named `[/x]` is
    data, not markup), or a rich Text where it is styled; so is the title. Columns in `optional` (header names, least
    needed last) are left out, last first, until every column's longest word fits the width; a column is wrapped
    only between words. Where even the rest cannot fit, words are folded rather than cut."""
    from rich.table import Table
    from rich.text import Text

    out = console()
    header = rows[0]
    body = [[c if isinstance(c, Text) else Text(as_text(str(c))) for c in r] for r in rows[1:]]
    shown = list(range(len(header)))
    left_out: list[str] = []

    def longest_word(j: int) -> int:
        cells = [header[j]] + [r[j].plain for r in body]
        return max((len(w) for c in cells for w in c.split()), default=1)

    def needed(columns: list[int]) -> int:
        return sum(longest_word(j) + 3 for j in columns) + 1  # a column's padding and border, then the last border

    for name in reversed(optional):
        if needed(shown) <= out.width or name not in header:
            continue
        shown.remove(header.index(name))
        left_out.append(name)
    fits = needed(shown) <= out.width
    t = Table(title=Text(as_text(title)) if title is not None else None)
    for j in shown:
        t.add_column(header[j], overflow="fold", min_width=longest_word(j) if fits else None)
    for r in body:
        t.add_row(*[r[j] for j in shown])
    out.print(t)
    if left_out:
        print(
            f"cudagent: {out.width} columns hold no more; left out: {', '.join(reversed(left_out))} "
            "(a wider terminal, or COLUMNS=160, shows them)",
            file=sys.stderr,
        )
