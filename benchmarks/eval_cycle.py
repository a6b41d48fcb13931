"""Benchmark: the time of one agent iteration (edit a kernel, build, verify, profile), cudagent against the naive
cycle of the released CUDA Agent environment (benchmarks/naive_cycle.py).

For each task: a fresh workspace with the example's CUDA solution. Ours: one cold evaluation (first build,
baselines, device peaks), then ITERATIONS rounds of "append a line to a .cu file, evaluate with timing". Naive: the
same edit, then a full rebuild, a verification process and a profiling process, ITERATIONS times.

    python benchmarks/eval_cycle.py [--out benchmarks/results/eval_cycle.json] [--naive-from EARLIER.json ...]

--naive-from takes each task's naive figures from earlier results files (the smallest of them, so the speedup is
the least favourable) instead of measuring them again: the naive cycle runs none of cudagent's code, so it only
needs measuring again on a different machine or software stack.

Writes per-task figures and `speedup`: naive time per iteration over ours, the smallest of the tasks. Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASKS = ("softmax", "layernorm", "scale_shift_tanh")
ITERATIONS = 3  # ours, after the cold first one
NAIVE_ITERATIONS = 1  # every naive iteration is the same full rebuild plus two fresh processes


def workspace_for(task: str, root: Path):
    from cudagent.task import load_task
    from cudagent.workspace import Workspace

    the_task = load_task(ROOT / "examples" / "tasks" / f"{task}.py")
    ws = Workspace.create(root, the_task.source)
    solution = ROOT / "examples" / "solutions" / "cuda" / task
    shutil.copy(solution / "model_new.py", ws.model_new_py)
    shutil.copytree(solution / "kernels", ws.kernels_dir, dirs_exist_ok=True)
    return the_task, ws


def edit(ws, k: int) -> None:
    kernel = sorted(ws.kernels_dir.glob("*.cu"))[0]
    with open(kernel, "a") as f:
        f.write(f"// iteration {k}\n")


def ours(task: str, scratch: Path) -> dict:
    from cudagent.evaluator import Evaluator
    from cudagent.hardware import resolve_device

    the_task, ws = workspace_for(task, scratch / f"ours-{task}")
    times, verdicts = [], []
    with Evaluator(the_task, resolve_device("cuda")) as evaluator:
        start = time.monotonic()
        first = evaluator.evaluate(ws)
        first_s = time.monotonic() - start
        assert first.correct, first.summary()
        for k in range(ITERATIONS):
            start = time.monotonic()
            edit(ws, k)
            verdict = evaluator.evaluate(ws)
            times.append(time.monotonic() - start)
            assert verdict.correct and verdict.build["recompiled"], verdict.summary()
            verdicts.append(verdict)
    last = verdicts[-1]
    return {
        "first_s": first_s,
        "iterations_s": times,
        "per_iteration_s": statistics.median(times),
        "phases_s": last.seconds,
        "tier": last.tier,
        "time_ms": last.time_ms,
        "candidate_samples": last.timing["targets"]["candidate"]["event_ms"]["samples"],
        "trials": len(last.trials),
        "confirmations": [v.timing.get("confirmation") for v in verdicts],
        "notes": last.notes,
    }


def naive(task: str, scratch: Path) -> dict:
    _, ws = workspace_for(task, scratch / f"naive-{task}")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TORCH_CUDA_ARCH_LIST="9.0")
    steps: dict[str, list[float]] = {"compile": [], "verify": [], "profile": []}
    for k in range(NAIVE_ITERATIONS):
        edit(ws, k)
        for step in steps:
            start = time.monotonic()
            proc = subprocess.run(
                [sys.executable, str(ROOT / "benchmarks" / "naive_cycle.py"), str(ws.root), step],
                cwd=ws.root,
                env=env,
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise SystemExit(f"naive {step} failed for {task}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            steps[step].append(time.monotonic() - start)
    per_step = {s: statistics.median(v) for s, v in steps.items()}
    return {"steps_s": steps, "per_step_s": per_step, "per_iteration_s": sum(per_step.values())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "eval_cycle.json"))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--naive-from", nargs="*", default=[], help="earlier results whose naive figures to reuse")
    args = parser.parse_args()
    import torch

    earlier = [json.loads(Path(p).read_text()) for p in args.naive_from]
    results = {}
    with tempfile.TemporaryDirectory(prefix="eval-cycle-") as tmp:
        for task in args.tasks.split(","):
            if earlier:
                n = min((e["tasks"][task]["naive"] for e in earlier), key=lambda x: x["per_iteration_s"])
                n = {**n, "reused_from": [str(p) for p in args.naive_from]}
            else:
                n = naive(task, Path(tmp))
            o = ours(task, Path(tmp))
            results[task] = {"naive": n, "ours": o, "speedup": n["per_iteration_s"] / o["per_iteration_s"]}
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps({"partial": True, "tasks": results}, indent=2))
            print(
                f"{task}: naive {n['per_iteration_s']:.1f} s/iteration ({n['per_step_s']}), ours "
                f"{o['per_iteration_s']:.1f} s/iteration ({o['phases_s']}), first {o['first_s']:.1f} s, "
                f"speedup {results[task]['speedup']:.1f}x",
                flush=True,
            )
    out = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "iterations": ITERATIONS,
        "naive_iterations": NAIVE_ITERATIONS,
        "tasks": results,
        "speedup": min(r["speedup"] for r in results.values()),
        "method": __doc__.strip().splitlines()[0],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"speedup (smallest over tasks): {out['speedup']:.2f}x -> {args.out}")


if __name__ == "__main__":
    main()
