"""Benchmark: cudagent's times beside KernelBench's own timing code, on the same machine, one after the other.

    python benchmarks/kernelbench_timing.py KERNELBENCH_ROOT [--tasks 1,7,40] [--candidates add,fuse_gelu] [--out F]

KERNELBENCH_ROOT is an unchanged checkout of KernelBench (its `src/` is put on the path; nothing of it is copied
here). For each level-1 task: eager and torch.compile times by cudagent (`Baselines`: the median of max(device, host
enqueue) per call, L2 flushed, inputs changed before each call) and by KernelBench's
`timing.time_execution_with_cuda_event` (CUDA events around each call, L2 thrashed with 256 MB before it, 100 trials
after 5 warm-up calls; the median and the mean are kept). For each of KernelBench's few-shot solutions
(`src/kernelbench/prompts/few_shot/model_new_ex_<name>.py` against `model_ex_<name>.py`): the whole cudagent evaluation
(verdict, tier, the three medians) and KernelBench's timing of the same three targets, the candidate's module being
the one cudagent built (build/inline.py serves it to KernelBench's process too, so both time one binary).

Writes one row per target with both medians, their ratio and cudagent's device share (device median / compared
median: near 1, the device dominates and the two harnesses measure the same thing; the issue asks them within 5%
there), and the machine's state. Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_TASKS = "1,7,8,12,40,50,54,62,73,81,88,95"
DEFAULT_CANDIDATES = "add,fuse_gelu,tiled_matmul"


def kb_times(timing, source: str, model_new_source: str | None, prebuilt: Path | None) -> dict:
    """KernelBench's cuda-event timing of eager, compiled and (if given) the candidate, in this process."""
    import torch

    time_execution_with_cuda_event = timing.time_execution_with_cuda_event
    device = torch.device("cuda:0")
    Model, get_init_inputs, get_inputs = _load(source)
    set_seed(42)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in get_inputs()]
    set_seed(42)
    init = get_init_inputs()
    out = {}
    with torch.no_grad():
        model = Model(*init).to(device)
        targets = {"eager": model, "compile": torch.compile(model)}
        if model_new_source is not None:
            from cudagent.evaluator.toolchain.inline import install

            install(str(prebuilt))  # the module cudagent built: both harnesses time one binary
            context: dict = {}
            exec(compile(model_new_source, "model_new.py", "exec"), context)
            set_seed(42)
            targets["candidate"] = context["ModelNew"](*init).to(device)
        for name, fn in targets.items():
            times = time_execution_with_cuda_event(
                fn, inputs, num_warmup=5, num_trials=100, verbose=False, device=device
            )
            out[name] = {"median": statistics.median(times), "mean": statistics.fmean(times), "min": min(times)}
    del model, targets, inputs
    torch.cuda.empty_cache()
    return out


def _kernelbench_timing(src: Path):
    """KernelBench's `src/kernelbench/timing.py`, loaded as a file: the package's __init__ imports its LLM clients
    (litellm, openai, dotenv), which a GPU host without network access does not have; timing.py needs only numpy."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernelbench_timing", src / "kernelbench" / "timing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(source: str):
    """(Model, get_init_inputs, get_inputs) as KernelBench's eval.load_original_model_and_inputs gives them: the
    source executed into a fresh namespace."""
    context: dict = {}
    exec(compile(source, "<string>", "exec"), context)
    return context["Model"], context["get_init_inputs"], context["get_inputs"]


def set_seed(seed: int) -> None:
    """KernelBench's eval.set_seed: torch's CPU and CUDA generators."""
    import torch

    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)


def ours_baselines(task) -> dict:
    from cudagent.device.info import resolve_device
    from cudagent.evaluator.timing.baselines import Baselines
    from cudagent.evaluator.timing.measure import Plan

    device = resolve_device("cuda")
    baselines = Baselines(task, device, "default", Plan())
    try:
        got = baselines.get()
    finally:
        baselines.close()
    return {t: _ours(b) for t, b in got.items()}


def _ours(b) -> dict | None:
    if b is None:
        return None
    return {"median": b.compared_ms, "device_median": b.measurement.device.median}


def ours_candidate(task, model_new: Path, scratch: Path) -> tuple[dict, Path]:
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.workspace import Workspace

    ws = Workspace.create(scratch, task.source)
    ws.model_new_py.write_text(model_new.read_text())
    with Evaluator(task, resolve_device("cuda"), EvalOptions()) as ev:
        v = ev.evaluate(ws)
    targets = (v.timing or {}).get("targets") or {}
    times = {
        t: (
            {"median": v.time_ms.get(t), "device_median": (targets.get(t) or {}).get("device_ms", {}).get("median")}
            if v.time_ms.get(t) is not None
            else None
        )
        for t in ("eager", "compile", "candidate")
    }
    verdict = {
        "correct": v.correct,
        "tier": v.tier,
        "codes": sorted({x.code for x in v.violations}),
        "seconds": v.seconds,
    }
    return {"verdict": verdict, **times}, _prebuilt(ws, scratch.parent / f"{scratch.name}-prebuilt")


def _prebuilt(ws, folder: Path) -> Path:
    """The modules cudagent built for the candidate's load_inline calls, laid out as a hand-in holds them (by key)."""
    from cudagent.device.info import resolve_device
    from cudagent.evaluator.toolchain.inline import extract, folder_for, module_path

    specs, _ = extract(ws.model_new_py.read_text())
    for spec in specs:
        built = folder_for(spec, resolve_device("cuda")) / f"{spec.name}.so"
        target = module_path(folder, spec)
        target.parent.mkdir(parents=True, exist_ok=True)
        if built.is_file():
            shutil.copyfile(built, target)
    return folder


def rows_of(name: str, ours: dict, kb: dict) -> list[dict]:
    rows = []
    for target in ("eager", "compile", "candidate"):
        o, k = ours.get(target), kb.get(target)
        if not o or not k:
            continue
        rows.append(
            {
                "name": name,
                "target": target,
                "cudagent_ms": round(o["median"], 5),
                "kernelbench_median_ms": round(k["median"], 5),
                "kernelbench_mean_ms": round(k["mean"], 5),
                "ratio": round(o["median"] / k["median"], 3),
                "device_share": round(o["device_median"] / o["median"], 3) if o.get("device_median") else None,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kernelbench", type=Path)
    parser.add_argument("--tasks", default=DEFAULT_TASKS, help="level-1 task numbers, comma-separated")
    parser.add_argument("--candidates", default=DEFAULT_CANDIDATES, help="few-shot solutions, comma-separated")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "kernelbench_timing.json")
    args = parser.parse_args()
    timing = _kernelbench_timing(args.kernelbench / "src")
    from benchmarks.eval_cycle import machine_state
    from cudagent.task import load_task

    result = {"machine_before": machine_state(), "rows": [], "verdicts": {}, "method": __doc__}
    level1 = args.kernelbench / "KernelBench" / "level1"

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))

    few_shot = args.kernelbench / "src" / "kernelbench" / "prompts" / "few_shot"
    for name in [n for n in args.candidates.split(",") if n]:
        t0 = time.monotonic()
        reference, model_new = few_shot / f"model_ex_{name}.py", few_shot / f"model_new_ex_{name}.py"
        task = load_task(reference)
        with tempfile.TemporaryDirectory() as scratch:
            ours, prebuilt = ours_candidate(task, model_new, Path(scratch) / "ws")
            result["verdicts"][name] = ours.pop("verdict")
            kb = kb_times(timing, reference.read_text(), model_new.read_text(), prebuilt)
        rows = rows_of(f"few_shot/{name}", ours, kb)
        result["rows"] += rows
        save()
        print(name, result["verdicts"][name], f"({time.monotonic() - t0:.0f} s)", flush=True)
        for r in rows:
            print(json.dumps(r), flush=True)
    for number in [n for n in args.tasks.split(",") if n]:
        (path,) = sorted(level1.glob(f"{number}_*.py"))
        t0 = time.monotonic()
        task = load_task(path)
        ours = ours_baselines(task)
        kb = kb_times(timing, path.read_text(), None, None)
        rows = rows_of(path.stem, ours, kb)
        result["rows"] += rows
        save()
        for r in rows:
            print(json.dumps(r), f"({time.monotonic() - t0:.0f} s)", flush=True)
    result["machine_after"] = machine_state()
    dominated = [r for r in result["rows"] if r["device_share"] and r["device_share"] >= 0.95]
    result["summary"] = {
        "rows": len(result["rows"]),
        "device_dominated_rows": len(dominated),
        "device_dominated_within_5_percent": sum(1 for r in dominated if abs(r["ratio"] - 1) <= 0.05),
    }
    save()
    print(json.dumps(result["summary"]), "->", args.out)


if __name__ == "__main__":
    main()
