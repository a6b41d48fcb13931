"""Errors a user can cause, each with the exit code the CLI ends with.

The CLI turns a `CudagentError` into one sentence on stderr and its exit code; anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    # The candidate was evaluated and rejected (incorrect, a violation, a build failure, a crash or a hang).
    REJECTED = 1
    # The input was unusable: a bad task file, a missing candidate, bad arguments.
    USAGE = 2
    # The machine cannot do what was asked: no GPU for --device cuda, no compiler, no model server.
    ENVIRONMENT = 3
    # A run ended because its evaluator judged nothing several calls in a row (a service down, a worker faulting).
    EVALUATOR = 4
    INTERRUPTED = 130  # SIGINT (Ctrl-C, or kill -INT)
    TERMINATED = 143  # SIGTERM (a process manager stopping it)


class CudagentError(Exception):
    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class TaskError(CudagentError):
    """The task file cannot serve as a reference (syntax error, missing names, a reference that raises...)."""

    exit_code = ExitCode.USAGE


class CandidateError(CudagentError):
    """The candidate path is unusable (missing, not a directory with model_new.py, ...)."""

    exit_code = ExitCode.USAGE


class EnvironmentProblem(CudagentError):
    """The machine lacks something the request needs (a GPU, a compiler, a reachable model server)."""

    exit_code = ExitCode.ENVIRONMENT


class EvaluatorUnusable(CudagentError):
    """A run's evaluator judged nothing several calls in a row; the run ended, recorded and resumable."""

    exit_code = ExitCode.EVALUATOR


class Terminated(Exception):
    """The process was asked to stop (SIGTERM); what it was doing was ended and recorded."""
