"""Model text printed for a person: shown, never interpreted by the terminal.

A model's reply, a tool's output or a commit message can hold escape sequences: a window title (OSC 0), a hidden
hyperlink (OSC 8), clearing the screen, moving the cursor to rewrite what was printed above, or bidirectional
overrides that make code read differently from what it is. Everything a review command prints of such text goes
through `shown`, which writes every control character as its escape, so the bytes that would have acted are there
to see:

    >>> shown("ok\\x1b]0;pwned\\x07 done\\r\\nnext\\tcol")
    'ok\\\\x1b]0;pwned\\\\x07 done\\\\r\\nnext\\tcol'
    >>> shown("price \\u202e1$")
    'price \\\\u202e1$'
"""

from __future__ import annotations

import re

# C0 controls but newline and tab, DEL, C1 controls, and the Unicode bidirectional embeddings, overrides and isolates
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """`text` with every control character written as its Python escape (newlines and tabs kept)."""
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match) -> str:
    ch = match.group()
    if ch == "\r":
        return "\\r"
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
