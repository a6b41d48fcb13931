"""Benchmark: the first verdict on a machine whose caches hold only what `cudagent doctor --prepare` made, and a
KernelBench-format (load_inline) candidate's build cold and repeated.

    python benchmarks/cold_start.py [--out FILE.json] [--tasks softmax layernorm scale_shift_tanh]
                                    [--inline DIR ...] [--runs 1]

1. `cudagent doctor --prepare --no-server` into a fresh cache: the machine's facts (link-audit calibration, peaks).
2. Each task: a cache holding only what doctor made (no baselines, no inductor kernels, none of the task's objects),
   `cudagent check examples/tasks/T.py examples/solutions/cuda/T --json` in a fresh process: the wall time of the
   command and the verdict's phases (`seconds`) and `timeline` (when each ran: the build beside the baselines).
3. Each --inline folder (task.py + a KernelBench model_new.py): checked cold (lean includes, the default), again
   with the same cache (repeated: the same call built once per machine), and cold with CUDAGENT_LEAN_INCLUDES=0
   (compiled as written): build seconds and verdicts side by side.

Needs a GPU for the figures that matter (the tasks' solutions are CUDA). Prints one line per measurement and
writes the whole record, with the machine's state before and after, to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict:
    state = {"cpus": os.cpu_count(), "load_average": os.getloadavg(), "platform": platform.platform()}
    try:
        state["gpu"] = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,temperature.gpu,utilization.gpu,clocks.sm",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        state["gpu"] = None
    return state


def cudagent(args: list[str], cache: Path, extra_env: dict | None = None, timeout: float = 1200) -> tuple[float, dict]:
    env = {**os.environ, "CUDAGENT_CACHE_DIR": str(cache), **(extra_env or {})}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "cudagent", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    wall = round(time.monotonic() - start, 2)
    try:
        return wall, json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return wall, {"exit": done.returncode, "error": (done.stderr or done.stdout)[-1500:]}


def facts_only(facts: Path, dest: Path) -> Path:
    """A cache holding only what doctor made (hard links): its link-audit calibration and peaks, and the compiler
    cache's objects of the calibration extension it built on the way."""
    shutil.copytree(facts, dest, copy_function=os.link)
    return dest


def verdict_row(wall: float, v: dict) -> dict:
    return {
        "wall_s": wall,
        "correct": v.get("correct"),
        "tier": v.get("tier"),
        "codes": sorted({x["code"] for x in v.get("violations", [])}),
        "seconds": v.get("seconds"),
        "timeline": v.get("timeline"),
        "build_s": (v.get("build") or {}).get("seconds"),
        "build_notes": (v.get("build") or {}).get("notes"),
        "error": v.get("error") if not v.get("correct") else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cold_start.json")
    parser.add_argument("--tasks", nargs="*", default=["softmax", "layernorm", "scale_shift_tanh"])
    parser.add_argument("--inline", nargs="*", type=Path, default=[])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--device", default="cuda", help="cuda (the tasks' CUDA solutions) or cpu (their C++ ones)")
    parser.add_argument("--no-timing", action="store_true", help="verdicts without baselines (the build's figures)")
    parser.add_argument(
        "--compare-pch", action="store_true", help="each task also with doctor's precompiled headers removed"
    )
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="cold-start-"))
    record: dict = {"machine_before": machine(), "runs": []}
    try:
        for run in range(args.runs):
            out: dict = {"tasks": {}, "inline": {}}
            facts = scratch / f"run{run}" / "doctor"
            wall, doc = cudagent(["doctor", "--prepare", "--no-server", "--json"], facts)
            out["doctor_prepare"] = {"wall_s": wall, "checks": doc.get("checks", doc)}
            print(f"run {run}: doctor --prepare {wall} s", flush=True)
            for task in args.tasks:
                variants = {"": False, " (no doctor PCH)": True} if args.compare_pch else {"": False}
                for label, drop_pch in variants.items():
                    cache = facts_only(facts, scratch / f"run{run}" / f"{task}{'-nopch' if drop_pch else ''}")
                    if drop_pch:
                        shutil.rmtree(cache / "pch", ignore_errors=True)
                    argv = [
                        "check",
                        str(ROOT / "examples" / "tasks" / f"{task}.py"),
                        str(ROOT / "examples" / "solutions" / args.device / task),
                        "--json",
                        "--device",
                        args.device,
                    ] + (["--no-timing"] if args.no_timing else [])
                    wall, v = cudagent(argv, cache)
                    out["tasks"][task + label] = verdict_row(wall, v)
                    print(
                        f"run {run}: {task}{label}: first verdict {wall} s (tier {v.get('tier')}), phases "
                        f"{v.get('seconds')}, timeline {v.get('timeline')}",
                        flush=True,
                    )
            for folder in args.inline:
                name = folder.name
                argv = ["check", str(folder / "task.py"), str(folder / "model_new.py"), "--json", "--no-timing"]
                cache = facts_only(facts, scratch / f"run{run}" / f"inline-{name}")
                rows = {}
                rows["cold"] = verdict_row(*cudagent(argv, cache))
                rows["repeated"] = verdict_row(*cudagent(argv, cache))
                full = facts_only(facts, scratch / f"run{run}" / f"inline-{name}-as-written")
                rows["cold_as_written"] = verdict_row(*cudagent(argv, full, {"CUDAGENT_LEAN_INCLUDES": "0"}))
                out["inline"][name] = rows
                print(
                    f"run {run}: {name}: "
                    + ", ".join(
                        f"{k} build {r['build_s']} s (wall {r['wall_s']} s, correct {r['correct']}, {r['codes']})"
                        for k, r in rows.items()
                    ),
                    flush=True,
                )
            record["runs"].append(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    record["machine_after"] = machine()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
