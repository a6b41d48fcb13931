"""Benchmark: decontamination of a 6,000-task set against KernelBench's 250 (levels 1-3), on the CPU.

The set is 6,000 tasks from the programmatic composer (6,000 different chains from seed 0, GPU sizes), as files; the
step timed is
the pipeline's screening as `cudagent data filter` runs it (read, static checks, normalized-AST fingerprints,
duplicates, similarity to every reference), with no running filters. Target: under 2 minutes on 2 CPU cores.

    python benchmarks/decontaminate.py --against KERNELBENCH_CHECKOUT [--tasks 6000] [--rounds 3] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cudagent.bench.tasks import discover  # noqa: E402
from cudagent.data.compose import distinct  # noqa: E402
from cudagent.data.pipeline import FilterConfig, Pipeline  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", required=True, type=Path)
    parser.add_argument("--tasks", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "decontaminate.json"))
    args = parser.parse_args()
    refs = {t.key: t.path.read_text(errors="replace") for t in discover(args.against, ["1", "2", "3"])}
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "references": len(refs),
        "tasks": args.tasks,
        "rounds": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "tasks"
        folder.mkdir()
        start = time.perf_counter()
        for c in distinct(0, args.tasks, "gpu"):  # different chains: every task reaches the similarity screen
            (folder / f"t{c.seed:05d}_{c.name}.py").write_text(c.source)
        result["compose_s"] = round(time.perf_counter() - start, 2)
        files = sorted(folder.glob("*.py"))
        for r in range(args.rounds):
            out = Path(tmp) / f"out{r}"
            config = FilterConfig(slots=[], references=refs)  # no workers: the screening alone
            start = time.perf_counter()
            pipeline = Pipeline(config, out)
            pipeline.run(files)
            wall = time.perf_counter() - start
            log = out / "filter.jsonl"  # only drops are written by the screening; the rest wait for the workers
            rows = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
            dropped = Counter(x["dropped_by"] for x in rows)
            row = {"wall_s": round(wall, 2), "dropped": dict(dropped), "passed_screen": len(files) - len(rows)}
            row["load_avg"] = os.getloadavg()
            print(json.dumps(row), flush=True)
            result["rounds"].append(row)
    walls = [r["wall_s"] for r in result["rounds"]]
    result["summary"] = {"wall_s_range": [min(walls), max(walls)], "target_s": 120, "meets_target": max(walls) < 120}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"]))


if __name__ == "__main__":
    main()
