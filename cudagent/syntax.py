"""Python source parsed into an `ast` tree, one thread at a time.

CPython 3.11's conversion of a parse tree into `ast` objects keeps its recursion depth in state shared by every
thread: two threads parsing at once can fail with `SystemError: AST constructor recursion depth mismatch` (seen
when an evaluator's build thread and the agent's thread both read a candidate). Every parse in cudagent goes
through `parse`, which holds one lock; a parse takes milliseconds, so nothing waits long.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, never beside another thread's parse."""
    with _LOCK:
        return ast.parse(source, filename=filename)
