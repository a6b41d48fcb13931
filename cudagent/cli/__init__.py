"""The `cudagent` command line. Commands import torch and the evaluator lazily, so `cudagent --help` is instant.

Human-facing text goes to stderr, results to stdout; every command ends with a documented exit code
(cudagent.errors.ExitCode).
"""

from __future__ import annotations

import json
import sys
import warnings

import typer

import cudagent.cli.bench as _bench
import cudagent.cli.check as _check  # each module registers its commands on `app`
import cudagent.cli.data as _data
import cudagent.cli.doctor as _doctor
import cudagent.cli.hotspots as _hotspots
import cudagent.cli.optimize as _optimize
import cudagent.cli.review as _review
import cudagent.cli.serve as _serve
import cudagent.cli.train as _train
from cudagent.cli.app import app
from cudagent.errors import CudagentError, ExitCode
from cudagent.syntax import guard_every_parse

del _check, _data, _doctor, _hotspots, _optimize, _review, _bench, _serve, _train


def _answer_interrupts() -> None:
    """Ctrl-C and `kill -INT` end a run as documented (exit 130, resumable) even when cudagent was started with
    SIGINT ignored (a background job of a shell script) or with it or SIGTERM blocked in an inherited signal mask."""
    import signal

    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main() -> None:
    _answer_interrupts()
    guard_every_parse()  # CPython 3.11: threads that parse at once can fail (syntax.py)
    # torch warns on import when NumPy is absent; cudagent does not need NumPy, and the warning would come before
    # every message a user reads.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        app()
    except CudagentError as exc:
        typer.echo(f"cudagent: {exc.message}", err=True)
        if "--json" in sys.argv[1:]:  # a JSON stream promised on stdout ends with a JSON object, errors too
            typer.echo(json.dumps({"error": exc.message, "exit_code": int(exc.exit_code)}))
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        typer.echo("cudagent: interrupted", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
