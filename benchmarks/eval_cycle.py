"""Benchmark: the time of one agent iteration (edit a kernel, build, verify, profile), cudagent against the naive
cycle of the released CUDA Agent environment (benchmarks/naive_cycle.py).

For each task: a fresh workspace with the example's CUDA solution. Ours: one cold evaluation (first build,
baselines, device peaks), then ITERATIONS rounds of "append a line to a .cu file, evaluate with timing". Naive: the
same edit, then a full rebuild, a verification process and a profiling process, ITERATIONS times.

    python benchmarks/eval_cycle.py [--out FILE.json] [--runs 3] [--naive-from EARLIER.json ... | --no-naive]

--naive-from takes each task's naive figures from earlier results files (the smallest of them, so the speedup is
the least favourable) instead of measuring them again: the naive cycle runs none of cudagent's code, so it only
needs measuring again on a different machine or software stack. --no-naive leaves it out (no speedup then).

Runs every task --runs times in one call (the first run on whatever caches the machine has: on a fresh one, cold)
and writes each run's figures, the spread over runs (min, median, max) of the iteration time and of every
verification, the cold first evaluation apart, and the machine's state before and after. Needs a GPU.
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
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator

    the_task, ws = workspace_for(task, scratch / f"ours-{task}")
    times, verdicts = [], []
    with Evaluator(the_task, resolve_device("cuda"), EvalOptions(spare_process=True)) as evaluator:
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
        "first_phases_s": first.seconds,
        "verify_s": [v.seconds.get("verify") for v in verdicts],
        "iterations_s": times,
        "per_iteration_s": statistics.median(times),
        "phases_s": last.seconds,
        "tier": last.tier,
        "time_ms": last.time_ms,
        "candidate_samples": last.timing["targets"]["candidate"]["event_ms"]["samples"],
        "trials": len(last.trials),
        "trial_s": {t.name: t.seconds for t in last.trials},
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


def machine_state() -> dict:
    """What the figures depend on, recorded beside them: GPU, clocks, temperature, driver, load, software."""
    import torch

    query = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,persistence_mode"
    smi = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "gpu": torch.cuda.get_device_name(),
        "nvidia_smi": f"{query}: {smi}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "git": git.stdout.strip(),
        "cache_dir": os.environ.get("CUDAGENT_CACHE_DIR"),
    }


def spread(xs: list[float]) -> dict:
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "eval_cycle.json"))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--runs", type=int, default=3, help="whole runs (each task in a fresh workspace), one call")
    parser.add_argument("--naive-from", nargs="*", default=[], help="earlier results whose naive figures to reuse")
    parser.add_argument("--no-naive", action="store_true", help="time cudagent's cycle alone")
    args = parser.parse_args()

    earlier = [json.loads(Path(p).read_text()) for p in args.naive_from]
    tasks = args.tasks.split(",")
    out: dict = {"machine_before": machine_state(), "iterations": ITERATIONS, "runs": []}
    naive_by_task = {}
    for task in tasks:
        if earlier:
            n = min((e["naive"][task] for e in earlier), key=lambda x: x["per_iteration_s"])
            naive_by_task[task] = {**n, "reused_from": [str(p) for p in args.naive_from]}
    with tempfile.TemporaryDirectory(prefix="eval-cycle-") as tmp:
        for run in range(args.runs):
            results = {}
            for task in tasks:
                if task not in naive_by_task and not args.no_naive:
                    naive_by_task[task] = naive(task, Path(tmp) / f"run{run}")
                n = naive_by_task.get(task, {"per_iteration_s": float("nan")})
                o = ours(task, Path(tmp) / f"run{run}")
                results[task] = {"ours": o, "speedup": n["per_iteration_s"] / o["per_iteration_s"]}
                print(
                    f"run {run + 1} {task}: ours {o['per_iteration_s']:.2f} s/iteration "
                    f"(iterations {[round(x, 2) for x in o['iterations_s']]}, verify "
                    f"{[round(x, 2) for x in o['verify_s']]}, phases {o['phases_s']}), first {o['first_s']:.1f} s "
                    f"({o['first_phases_s']}), naive {n['per_iteration_s']:.1f} s, "
                    f"speedup {results[task]['speedup']:.1f}x",
                    flush=True,
                )
            out["runs"].append(results)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps({**out, "naive": naive_by_task, "partial": True}, indent=2))
    out["machine_after"] = machine_state()
    out["naive"] = naive_by_task
    out["summary"] = {
        task: {
            "per_iteration_s": spread([r[task]["ours"]["per_iteration_s"] for r in out["runs"]]),
            "verify_s": spread([v for r in out["runs"] for v in r[task]["ours"]["verify_s"]]),
            "first_s_cold_machine": out["runs"][0][task]["ours"]["first_s"],
            "first_s_warm_caches": [r[task]["ours"]["first_s"] for r in out["runs"][1:]],
            "speedup_vs_naive": spread([r[task]["speedup"] for r in out["runs"]]),
        }
        for task in tasks
    }
    out["method"] = __doc__.strip().splitlines()[0]
    Path(args.out).write_text(json.dumps(out, indent=2))
    for task, s in out["summary"].items():
        print(
            f"{task}: iteration median over runs {s['per_iteration_s']}, verify {s['verify_s']}, "
            f"cold first {s['first_s_cold_machine']:.1f} s",
            flush=True,
        )
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
