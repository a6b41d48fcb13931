"""Python source parsed into an `ast` tree, one thread at a time.

CPython 3.11 keeps the recursion depth of its parse-tree-to-`ast` conversion in state that every thread shares; a
garbage collection in the middle of one conversion can hand the interpreter to another thread, whose parse resets
that depth, and the first then fails with `SystemError: AST constructor recursion depth mismatch` (CPython issue
gh-106905; seen when an evaluator's build thread and the agent's thread both read a candidate). Every parse in
cudagent goes through `parse`, which holds one lock; the processes that run several threads (the CLI, a service's
worker) also call `guard_every_parse()`, which puts the same lock around `ast.parse` itself, for the parses of the
standard library (a 3.11 traceback parses each line it underlines) and of other libraries. A parse takes
milliseconds: nothing waits long. The lock is reentrant, so that a parse inside a collection inside a parse (a
finalizer that formats a traceback) cannot deadlock.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.RLock()
_PARSE = ast.parse  # the standard library's own, whatever guard_every_parse() puts in its place


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, never beside another thread's parse."""
    with _LOCK:
        return _PARSE(source, filename=filename)


def guard_every_parse() -> None:
    """Make `ast.parse` take the same lock, for this whole process (idempotent)."""
    if getattr(ast.parse, "_cudagent_guarded", False):
        return

    def guarded(source, filename="<unknown>", mode="exec", **kwargs):
        with _LOCK:
            return _PARSE(source, filename, mode, **kwargs)

    guarded._cudagent_guarded = True
    guarded.__doc__ = _PARSE.__doc__
    ast.parse = guarded
