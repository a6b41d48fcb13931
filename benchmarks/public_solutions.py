"""Judge KernelBench-format solutions written elsewhere: does the evaluator reject only for real reasons?

    python benchmarks/public_solutions.py ROOT [--out results.json] [--jobs 8] [--timing]

ROOT holds one folder per solution with `task.py` (the reference, KernelBench format) and `model_new.py` (the
solution, KernelBench's single-file format). The solutions are public code of other projects and are not part of
this repository: fetch them into a git-ignored folder (for example KernelBench's few-shot examples and CUDA-L1's
released kernels) and point this script at it. Each is checked in a process of its own with `cudagent check
--json`; the table lists the verdict and the violation codes, the JSON file the full messages.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import subprocess
import sys
import time
from pathlib import Path


def check(folder: Path, timing: bool, timeout_s: float) -> dict:
    cmd = [sys.executable, "-m", "cudagent", "check", str(folder / "task.py"), str(folder / "model_new.py"), "--json"]
    if not timing:
        cmd.append("--no-timing")
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"name": folder.name, "exit": None, "error": f"no answer in {timeout_s:.0f} s"}
    row = {"name": folder.name, "exit": proc.returncode, "seconds": round(time.monotonic() - start, 1)}
    try:
        verdict = json.loads(proc.stdout)
    except ValueError:
        return {**row, "error": (proc.stderr or proc.stdout).strip()[-600:]}
    row.update(
        correct=verdict.get("correct"),
        tier=verdict.get("tier"),
        codes=sorted({v["code"] for v in verdict.get("violations", [])}),
        violations=verdict.get("violations", []),
        flags=verdict.get("flags", []),
        error=verdict.get("error"),
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    folders = sorted(p for p in args.root.iterdir() if (p / "task.py").is_file() and (p / "model_new.py").is_file())
    rows = []
    # each verdict printed and kept as it comes, so that a run cut short still leaves what it judged
    with cf.ThreadPoolExecutor(args.jobs) as pool:
        for done in cf.as_completed([pool.submit(check, f, args.timing, args.timeout) for f in folders]):
            rows.append(done.result())
            print(f"done: {_line(rows[-1])}", flush=True)
            if args.out:
                args.out.write_text(json.dumps(sorted(rows, key=lambda r: r["name"]), indent=1) + "\n")
    rows.sort(key=lambda r: r["name"])
    accepted = [r for r in rows if r.get("correct")]
    print(f"{len(rows)} solutions: {len(accepted)} accepted, {len(rows) - len(accepted)} rejected")
    for r in rows:
        print(_line(r))


def _line(r: dict) -> str:
    verdict = "accepted" if r.get("correct") else "rejected"
    detail = ", ".join(r.get("codes") or []) or (r.get("error") or "")[:120]
    return f"{r['name']:<24} {verdict:<9} tier {r.get('tier')!s:>2}  {detail}"


if __name__ == "__main__":
    main()
