"""Result files that survive a kill: an append-only JSON-lines log keyed by `key` (each line fsync'ed; a line cut
short is skipped on reading, the last line of a key wins), and a JSON file written whole or not at all."""

from __future__ import annotations

import json
import os
from pathlib import Path


def append_row(path: Path, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_rows(path: Path) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            if isinstance(row, dict) and "key" in row:
                rows[row["key"]] = row
    return rows


def write_json_atomic(path: str | Path, obj) -> None:
    """Written whole or not at all; the temporary name is this process's, so two writers never share it."""
    tmp = Path(f"{path}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, default=str))
    os.replace(tmp, path)
