"""Benchmark: what confinement of the candidate's process (cudagent/evaluator/jail/confine.py) costs an evaluation.

For each example task: one workspace with its solution for the device, one evaluator per level (best-effort and
off), a warm-up evaluation each, then ROUNDS evaluations per level, the levels interleaved (off, best-effort, off,
...) so that drift hits both alike. Reported per level and task: the evaluation's total, the candidate process's
start as the verification saw it, and the verification; the median difference best-effort minus off; and the cost
of confining itself (`confine.enter` in a throwaway process, best of 20).

    python benchmarks/confine_cost.py [--device cpu|cuda] [--rounds 5] [--out FILE.json]

CPU: the C++ solutions, without timing (the CPU timing is noise); CUDA: the CUDA solutions, with timing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASKS = ("softmax", "layernorm", "axpby")
LEVELS = ("off", "best-effort")

ENTER = """
import json, os, time, tempfile
import cudagent.evaluator.jail.privileges as isolation, cudagent.evaluator.jail.confine as confine
isolation.drop_privileges()
start = time.perf_counter()
confine.enter(confine.Plan("best-effort"))
print(json.dumps({"seconds": time.perf_counter() - start, "status": confine.status()}))
"""


def workspace_for(task: str, device: str, root: Path):
    from cudagent.task import load_task
    from cudagent.workspace import Workspace

    the_task = load_task(ROOT / "examples" / "tasks" / f"{task}.py")
    ws = Workspace.create(root, the_task.source)
    solution = ROOT / "examples" / "solutions" / device / task
    shutil.copy(solution / "model_new.py", ws.model_new_py)
    shutil.copytree(solution / "kernels", ws.kernels_dir, dirs_exist_ok=True)
    return the_task, ws


def enter_cost() -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(20):
            out = subprocess.run(
                [sys.executable, "-s", "-c", ENTER],
                cwd=scratch,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            runs.append(json.loads(out))
    seconds = [r["seconds"] for r in runs]
    return {"best_s": min(seconds), "median_s": statistics.median(seconds), "status": runs[0]["status"]}


def measure(task: str, device: str, rounds: int, scratch: Path) -> dict:
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator

    dev = resolve_device(device)
    the_task, ws = workspace_for(task, device, scratch / task)
    timing = dev.is_cuda
    evaluators = {lvl: Evaluator(the_task, dev, EvalOptions(confine=lvl, timing=timing)) for lvl in LEVELS}
    figures: dict[str, dict[str, list[float]]] = {lvl: {"total": [], "child_start": [], "verify": []} for lvl in LEVELS}
    held = {}
    try:
        for ev in evaluators.values():  # warm-up: builds, baselines, zygote
            v = ev.evaluate(ws)
            assert v.correct, v.summary()
        for _ in range(rounds):
            for lvl, ev in evaluators.items():
                v = ev.evaluate(ws)
                assert v.correct, v.summary()
                held[lvl] = v.confinement
                for phase in figures[lvl]:
                    figures[lvl][phase].append(v.seconds.get(phase, 0.0))
    finally:
        for ev in evaluators.values():
            ev.close()
    out = {"confinement": held}
    for lvl in LEVELS:
        out[lvl] = {phase: _spread(xs) for phase, xs in figures[lvl].items()}
    out["best_effort_minus_off_median_s"] = {
        phase: round(statistics.median(figures["best-effort"][phase]) - statistics.median(figures["off"][phase]), 4)
        for phase in figures["off"]
    }
    return out


def _spread(xs: list[float]) -> dict:
    return {"min": round(min(xs), 4), "median": round(statistics.median(xs), 4), "max": round(max(xs), 4), "n": len(xs)}


def machine_state(device: str) -> dict:
    import torch

    state = {
        "machine": platform.machine(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "torch": torch.__version__,
        "git": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
    }
    if device == "cuda":
        state["gpu"] = torch.cuda.get_device_name()
    return state


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {"machine_before": machine_state(args.device), "enter": enter_cost(), "tasks": {}}
    with tempfile.TemporaryDirectory(prefix="confine-cost-") as scratch:
        for task in TASKS:
            result["tasks"][task] = measure(task, args.device, args.rounds, Path(scratch))
            print(task, json.dumps(result["tasks"][task]["best_effort_minus_off_median_s"]), flush=True)
    result["machine_after"] = machine_state(args.device)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
