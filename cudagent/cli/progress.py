"""Progress of many tasks on stderr (bench, the dataset filter)."""

from __future__ import annotations

import typer


class TaskProgress:
    """Finished tasks as lines, and (on a terminal) a bar with the count done, left and the time to go, on
    stderr; without a terminal, just the lines."""

    def __init__(self, total: int, enabled: bool, label: str = "bench"):
        self.total, self.enabled, self.label = total, enabled, label
        self._progress = None

    def __enter__(self) -> TaskProgress:
        if self.enabled and self.total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn(self.label),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("tasks, time left"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
                speed_estimate_period=24 * 3600,  # tasks take minutes: estimate from all of them, not the last 30 s
            )
            self._progress.start()
            self._task = self._progress.add_task("bench", total=self.total)
        return self

    def done(self, line: str, counts: bool = True) -> None:
        """A finished task's line; `counts`: it was run (a skipped task is not, and would skew the time left)."""
        if self._progress is not None:
            self._progress.console.print(line, highlight=False, soft_wrap=True, markup=False)
            if counts:
                self._progress.advance(self._task)
        else:
            typer.echo(line, err=True)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
