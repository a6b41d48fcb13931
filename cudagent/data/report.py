"""The dataset report: how many tasks each filter dropped (with examples of its reasons), the kept tasks' reference
runtimes and every task's similarity to the reference set, as histograms."""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from pathlib import Path

from cudagent.data.filters import FILTERS
from cudagent.png import histogram_plot


def build_report(rows: list[dict], meta: dict) -> dict:
    dropped = Counter(r["dropped_by"] for r in rows if r.get("dropped_by"))
    kept = [r for r in rows if not r.get("dropped_by")]
    examples = {}
    for f in FILTERS:
        examples[f] = [f"{r['name']}: {r['why']}" for r in rows if r.get("dropped_by") == f][:3]
    runtimes = Counter()
    for r in kept:
        if r.get("runtime_ms"):
            runtimes[_decade(r["runtime_ms"])] += 1
    similarities = Counter()
    for r in rows:
        score = (r.get("similarity") or {}).get("score")
        if score is not None:
            similarities[f"{min(0.9, math.floor(score * 10) / 10):.1f}"] += 1
    return {
        **meta,
        "tasks": len(rows),
        "kept": len(kept),
        "dropped": {f: dropped.get(f, 0) for f in FILTERS},
        "examples": examples,
        "runtime_ms_histogram": dict(sorted(runtimes.items(), key=lambda kv: float(kv[0].split("-")[0]))),
        "similarity_histogram": dict(sorted(similarities.items())),
        "worker_seconds": worker_seconds(rows),
    }


def worker_seconds(rows: list[dict]) -> dict:
    """Seconds a worker spent on one task, by how the task ended (a worker process per task: start-up included)."""
    by_end: dict[str, list[float]] = {}
    for r in rows:
        if r.get("check_s") is not None:
            by_end.setdefault(r.get("dropped_by") or "kept", []).append(r["check_s"])
    every = [s for times in by_end.values() for s in times]
    if not every:
        return {}
    summary = {end: {"tasks": len(t), "median_s": round(statistics.median(t), 2)} for end, t in sorted(by_end.items())}
    summary["all"] = {"tasks": len(every), "median_s": round(statistics.median(every), 2),
                      "mean_s": round(statistics.fmean(every), 2)}  # fmt: skip
    return summary


def _decade(ms: float) -> str:
    lo = 10 ** math.floor(math.log10(max(ms, 1e-6)))
    return f"{lo:g}-{lo * 10:g}"


def write_report(report: dict, out: Path) -> dict[str, Path]:
    paths = {"json": out / "report.json", "markdown": out / "report.md", "png": out / "histograms.png"}
    paths["json"].write_text(json.dumps(report, indent=2) + "\n")
    histogram_plot([report["runtime_ms_histogram"], report["similarity_histogram"]], str(paths["png"]))
    lines = [
        f"# Dataset filter report ({report['kept']} of {report['tasks']} tasks kept)",
        "",
        f"Device: {report.get('device')}; runtime window {report.get('runtime_ms')} ms; torch.compile backend "
        f"{report.get('compile')}; similarity threshold {report.get('max_similarity')} against "
        f"{report.get('references')} reference tasks.",
        "",
        "| filter | dropped | examples |",
        "| --- | --- | --- |",
    ]
    for f in FILTERS:
        ex = "<br>".join(e.replace("|", "\\|") for e in report["examples"][f])
        lines.append(f"| {f} | {report['dropped'][f]} | {ex} |")
    lines += ["", "`histograms.png`: the two histograms below, top to bottom.", ""]
    lines += ["Reference runtime of the kept tasks (ms): number of tasks", ""]
    lines += [f"- {k}: {v}" for k, v in report["runtime_ms_histogram"].items()] or ["- (none)"]
    lines += ["", "Highest similarity to a reference task, every task that got that far: number of tasks", ""]
    lines += [f"- {k}: {v}" for k, v in report["similarity_histogram"].items()] or ["- (no reference set)"]
    if report.get("worker_seconds"):
        lines += ["", "Seconds per task per worker (process start, checks and timing), by outcome:", ""]
        seconds = report["worker_seconds"].items()
        lines += [f"- {end}: {v['tasks']} tasks, median {v['median_s']} s" for end, v in seconds]
    paths["markdown"].write_text("\n".join(lines) + "\n")
    return paths
