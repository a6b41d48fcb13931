"""What a person or a program sees of a run while it goes.

JsonEvents   --json: one JSON object per line on stdout, the last one the run's summary
LivePanel    an interactive terminal: a rich panel on stderr (turn k/N, elapsed, tokens, best, last action)
PlainLines   otherwise: one line per turn on stderr

What the model wrote (a command, an error it caused) reaches the terminal as text only (boundary/terminal.py).
"""

from __future__ import annotations

import json
import sys
import time

from cudagent.boundary.terminal import shown


class JsonEvents:
    def __init__(self, stream=None):
        self.stream = stream or sys.stdout

    def event(self, event: dict) -> None:
        self.stream.write(json.dumps({"time": round(time.time(), 3), **event}, default=str) + "\n")
        self.stream.flush()

    def summary(self, summary: dict) -> None:
        self.event({"event": "summary", **summary})

    def close(self) -> None:
        pass


class PlainLines:
    """A log (stderr is a file or a pipe): a line per turn, and a line as each step of a turn starts, so that a
    long model reply or build is never a silent stretch."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr

    def progress(self, turn: int, what: str) -> None:
        self.stream.write(f"turn {turn}: {what}...\n")
        self.stream.flush()

    def event(self, e: dict) -> None:
        line = _line(e)
        if line:
            self.stream.write(line + "\n")
            self.stream.flush()

    def summary(self, summary: dict) -> None:
        sys.stdout.write(summary_text(summary) + "\n")
        sys.stdout.flush()

    def close(self) -> None:
        pass


class LivePanel:
    def __init__(self):
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        # transient: the panel goes when the run ends, so the last lines are the end and the summary, not a panel
        self.live = Live(console=self.console, refresh_per_second=4, transient=True)
        self.state = {"turn": 0, "max_turns": 0, "tokens": 0, "elapsed_s": 0.0, "best": None, "last": "starting"}
        self.now = ""
        self.started = time.monotonic()
        self.live.start()

    def event(self, e: dict) -> None:
        kind = e.get("event")
        if kind == "start":
            self.state.update(turn=e["turn"], max_turns=e["max_turns"], model=e.get("model"), branch=e.get("branch"))
        elif kind == "turn":
            self.state.update(
                turn=e["turn"], tokens=e["tokens"], elapsed_s=e["elapsed_s"], best=e["best"], last=e["summary"]
            )
            self.console.print(_line(e), highlight=False, markup=False)
        elif kind == "end":
            self.close()
            self.console.print(_line(e), highlight=False, markup=False)
            return
        elif kind in ("improvement", "notice", "final_evaluation"):
            line = _line(e)
            if line:
                self.console.print(line, highlight=False, markup=False)
        self.live.update(self._panel())

    def progress(self, turn: int, what: str) -> None:
        self.now = f"turn {turn}: {what}"
        self.live.update(self._panel())

    def _panel(self):
        from rich.panel import Panel
        from rich.table import Table

        s = self.state
        t = Table.grid(padding=(0, 2))
        t.add_row(
            "turn",
            f"{s['turn']}/{s['max_turns']}",
            "elapsed",
            f"{time.monotonic() - self.started:.0f} s",
            "tokens",
            f"{s['tokens']:,}",
        )
        t.add_row("best", _best_text(s["best"]), "model", str(s.get("model") or "?"), "", "")
        t.add_row("last", shown(str(s["last"]))[:100], "", "", "", "")
        if self.now:
            t.add_row("now", shown(self.now)[:100], "", "", "", "")
        return Panel(t, title=f"cudagent optimize  {s.get('branch') or ''}", expand=False)

    def summary(self, summary: dict) -> None:
        self.close()
        sys.stdout.write(summary_text(summary) + "\n")
        sys.stdout.flush()

    def close(self) -> None:
        if self.live.is_started:
            self.live.stop()


def _best_text(best: dict | None) -> str:
    if not best:
        return "none yet"
    text = f"tier {best['tier']}"
    if best.get("speedup_vs_compile"):
        text += f", {best['speedup_vs_compile']:.2f}x vs compile"
    if best.get("speedup_vs_eager"):
        text += f", {best['speedup_vs_eager']:.2f}x vs eager"
    return text + f" (turn {best['turn']})" if "turn" in best else text


def _line(e: dict) -> str | None:
    kind = e.get("event")
    if kind == "start":
        line = f"run {e['run_id']} on branch {e['branch']} (model {e['model']}), from turn {e['turn']}"
        return line + (f"\n  shell sandbox: {e['sandbox']['description']}" if e.get("sandbox") else "")
    if kind == "turn":
        commit = f" [{e['commit'][:8]}]" if e.get("commit") else ""
        return f"turn {e['turn']}/{e['max_turns']}: {shown(e['summary'])}{commit}"
    if kind == "improvement":
        commit = f" [{e['commit'][:8]}]" if e.get("commit") else ""
        return f"  new best at turn {e['turn']}: {_best_text(e)}{commit}"
    if kind == "notice":
        return f"  limit near: {e['reason']}"
    if kind == "final_evaluation":
        return f"re-evaluating the best commit {e['commit'][:8]} from pristine files"
    if kind == "end":
        return f"run ended: {e['exit_reason']}" + (f" ({shown(e['error'])})" if e.get("error") else "")
    return None


def summary_text(s: dict) -> str:
    turns = f"{s['turns']} turn" + ("" if s["turns"] == 1 else "s")
    lines = [f"run {s['run_id']}: {turns}, ended by {s['exit_reason']}"]
    if s.get("error"):
        lines.append(f"  error: {shown(s['error'])}")
    best = s.get("best")
    if best:
        lines.append(f"  best: {_best_text(best)}, commit {(best.get('commit') or '?')[:12]} (tag {best.get('tag')})")
    else:
        lines.append("  best: no correct kernel")
    lines.append(f"  branch {s['branch']} in {s['repo']}")
    lines.append(f"  review: cudagent log {s['run_id']}   export: cudagent export {s['run_id']} DEST")
    return "\n".join(lines)


def reporter_for(as_json: bool):
    if as_json:
        return JsonEvents()
    if sys.stderr.isatty():
        return LivePanel()
    return PlainLines()
