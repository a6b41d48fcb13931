"""The JSON a benchmark of repeated runs commits: the runs, their medians, the machine they ran on and the method."""

from __future__ import annotations

import json
import os
import platform
import statistics
from pathlib import Path


def write_run_summary(path: str | Path, runs: list[dict], method: str, **fields) -> dict:
    """Write `fields`, the machine's state, `runs`, the median of every figure and `method` to `path`; print the
    medians. Returns what was written."""
    out = {
        **fields,
        "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg(), "platform": platform.platform()},
        "runs": runs,
        "median": {k: statistics.median(r[k] for r in runs) for k in runs[0]},
        "method": method,
    }
    Path(path).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["median"]), "->", path)
    return out
