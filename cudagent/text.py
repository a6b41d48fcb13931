"""Words for people: a count with its noun in the right number ("1 kernel", "3 kernels"), never "kernel(s)"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"
