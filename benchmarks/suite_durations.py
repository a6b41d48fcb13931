"""Where the test suite's time goes: the per-directory (and slowest-file) sums of a pytest `--durations=0` log.

    python -m pytest -q --durations=0 ... > run.log
    python benchmarks/suite_durations.py run.log [other.log ...] --out benchmarks/results/suite/durations.md

Each log's wall time is read from pytest's last line ("... in 1234.56s"). With xdist (`-n 2`) the per-directory sums
are worker time, which adds up to about twice the wall time on two workers.
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

DURATION = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)", re.M)
WALL = re.compile(r" in ([\d.]+)s(?: \(|$)", re.M)
OUTCOME = re.compile(r"^=*\s*(.*(?:passed|failed).*) in [\d.]+s", re.M)


def directory(node: str) -> str:
    path = node.split("::")[0]
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else path


def summarize(text: str) -> tuple[dict[str, float], dict[str, float], float | None, str]:
    by_dir: dict[str, float] = collections.defaultdict(float)
    by_file: dict[str, float] = collections.defaultdict(float)
    for seconds, _, node in DURATION.findall(text):
        by_dir[directory(node)] += float(seconds)
        by_file[node.split("::")[0]] += float(seconds)
    walls = WALL.findall(text)
    outcomes = OUTCOME.findall(text)
    return by_dir, by_file, float(walls[-1]) if walls else None, outcomes[-1].strip("= ") if outcomes else "?"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = [(log.name, *summarize(log.read_text())) for log in args.logs]
    dirs = sorted({d for _, by_dir, *_ in runs for d in by_dir}, key=lambda d: -max(r[1].get(d, 0) for r in runs))
    lines = ["| directory | " + " | ".join(name for name, *_ in runs) + " |", "|---" * (len(runs) + 1) + "|"]
    for d in dirs:
        lines.append(f"| {d} | " + " | ".join(f"{r[1].get(d, 0.0):.0f} s" for r in runs) + " |")
    lines.append("| **sum of test times** | " + " | ".join(f"{sum(r[1].values()):.0f} s" for r in runs) + " |")
    lines.append("| **wall time** | " + " | ".join(f"{r[3]:.0f} s" if r[3] else "?" for r in runs) + " |")
    lines.append("| outcome | " + " | ".join(r[4] for r in runs) + " |")
    for name, _, by_file, *_ in runs:
        lines += ["", f"Slowest files in {name}:", ""]
        lines += [f"- {s:.0f} s {f}" for f, s in sorted(by_file.items(), key=lambda x: -x[1])[:12]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
