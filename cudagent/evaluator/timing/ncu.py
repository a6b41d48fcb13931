"""Opt-in Nsight Compute summary of the candidate's kernels: throughput, occupancy, registers, top stall reasons.

ncu wraps an ordinary evaluation child (same sanitized environment, same loading code); the child runs one forward
call inside an NVTX range named `cudagent`, and only kernels inside it are profiled. Feedback only: nothing here
changes a verdict.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import tempfile

from cudagent.evaluator.jail.process import ChildFailure, ChildProcess
from cudagent.trees import to_device

STALLS = (
    "long_scoreboard",
    "short_scoreboard",
    "barrier",
    "math_pipe_throttle",
    "mio_throttle",
    "lg_throttle",
    "wait",
    "not_selected",
    "membar",
    "branch_resolving",
    "dispatch_stall",
    "drain",
    "imc_miss",
    "no_instruction",
    "sleeping",
    "tex_throttle",
)
METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "compute_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "achieved_occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_occupancy": "sm__maximum_warps_per_active_cycle_pct",
    "registers": "launch__registers_per_thread",
    "grid": "launch__grid_size",
    "block": "launch__block_size",
}
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
MAX_KERNELS = 12


def ncu_binary() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "ncu")):
            return os.path.join(root, "bin", "ncu")
    return None


def ncu_summary(load_msg: dict, inputs: list, extra_env: dict, timeout_s: float = 600) -> tuple[list, str | None]:
    """(per-kernel summaries, None) or ([], the reason there are none)."""
    ncu = ncu_binary()
    if ncu is None:
        return [], "Nsight Compute (ncu) was not found; install it or put it on PATH"
    metrics = list(METRICS.values()) + [STALL_METRIC.format(s) for s in STALLS]
    with tempfile.TemporaryDirectory(prefix="cudagent-ncu-") as tmp:
        log = os.path.join(tmp, "ncu.csv")
        wrapper = [
            ncu,
            "--target-processes",
            "all",
            "--nvtx",
            "--nvtx-include",
            "cudagent/",
            "--clock-control",
            "none",
            "--launch-count",
            str(MAX_KERNELS),
            "--metrics",
            ",".join(metrics),
            "--csv",
            "--page",
            "raw",
            "--log-file",
            log,
        ]
        try:
            with ChildProcess(extra_env=extra_env, wrapper=wrapper) as child:
                reply = child.request(load_msg, timeout_s=timeout_s, what="loading ModelNew under ncu")
                if not reply.get("ok", False):
                    return [], f"ModelNew could not be loaded under ncu: {reply.get('error')}"
                reply = child.request(
                    {"op": "nvtx_call", "inputs": [to_device(x, "cpu") for x in inputs]},
                    timeout_s=timeout_s,
                    what="running under ncu",
                )
                if not reply.get("ok", False):
                    return [], f"the call under ncu failed: {reply.get('error')}"
        except ChildFailure as exc:
            return [], f"ncu failed: {exc.message}"
        try:
            with open(log) as f:
                text = f.read()
        except OSError:
            return [], "ncu wrote no report (is profiling permitted for this user?)"
    rows = parse_ncu_csv(text)
    return rows, None if rows else "ncu profiled no kernels"


def parse_ncu_csv(text: str) -> list[dict]:
    """Rows of `ncu --csv --page raw` (a header, a units line, one line per kernel) as summaries."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if len(lines) < 3:
        return []
    reader = list(csv.reader(io.StringIO("\n".join(lines))))
    header, data = reader[0], reader[2:]
    out = []
    for row in data:
        cell = dict(zip(header, row))
        summary = {"name": cell.get("Kernel Name", "?")}
        for key, metric in METRICS.items():
            summary[key] = _number(cell.get(metric))
        if summary["duration_ns"] is not None:
            summary["duration_us"] = summary.pop("duration_ns") / 1e3
        stalls = [(s, _number(cell.get(STALL_METRIC.format(s)))) for s in STALLS]
        summary["top_stalls"] = sorted(((s, x) for s, x in stalls if x), key=lambda sx: -sx[1])[:3]
        out.append(summary)
    return out


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None
