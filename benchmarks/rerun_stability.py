"""The rerun stability table: the same candidates benchmarked in separate `cudagent bench` runs (each with caches of
its own, so the baselines are measured again), side by side: does each get the same tier?

    python benchmarks/rerun_stability.py RUN1/report.json RUN2/report.json [...] [--out stability.md]

Prints (and writes) a markdown table: per task, each run's tier, candidate time, torch.compile time (what the tier
compares) and speedup over torch.compile, and whether the tiers agree. Exits 1 if any task's tiers differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def table(reports: list[dict]) -> tuple[str, int]:
    by_run = [{r["key"]: r for r in rep["results"]} for rep in reports]
    keys = sorted(set().union(*by_run))
    runs = range(1, len(reports) + 1)
    head = ["task", *(f"tier {i}" for i in runs), "agree"]
    head += [f"candidate ms {i}" for i in runs] + [f"compile ms {i}" for i in runs] + [f"vs compile {i}" for i in runs]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    disagree = 0
    for key in keys:
        rows = [run.get(key, {}) for run in by_run]
        tiers = [r.get("tier") for r in rows]
        agree = len(set(tiers)) == 1
        disagree += not agree
        t = [(r.get("time_ms") or {}) for r in rows]
        cells = [key, *(str(x) for x in tiers), "yes" if agree else "**no**"]
        cells += [_ms(x.get("candidate")) for x in t] + [_ms(x.get("compile")) for x in t]
        cells += [_x(r.get("speedup_vs_compile")) for r in rows]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n", disagree


def _ms(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def _x(x) -> str:
    return "-" if x is None else f"{x:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    reports = [json.loads(p.read_text()) for p in args.reports]
    text, disagree = table(reports)
    meta = [
        f"- run {i}: {p} ({r.get('device_name')}, torch {r.get('torch')})"
        for i, (p, r) in enumerate(zip(args.reports, reports), 1)
    ]
    summary = f"{len(text.splitlines()) - 2} tasks, {disagree} with tiers that differ between runs."
    text = "\n".join(meta) + "\n\n" + text + "\n" + summary + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    sys.exit(1 if disagree else 0)


if __name__ == "__main__":
    main()
