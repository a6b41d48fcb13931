"""Benchmark: where the time of an evaluation and of a build goes, phase by phase. Needs a GPU.

    python benchmarks/eval_breakdown.py [--out benchmarks/results/eval_breakdown.json] [--parts cupti,evaluate,build]
                                        [--inline-dir DIR]

- cupti: fresh interpreters, each timing `import torch`, the CUDA context and the first profiler sessions (CPU only,
  CPU and CUDA, all threads), under a few environments: what a candidate's process pays before its first trial.
- evaluate: one example (softmax, its CUDA solution): the cold evaluation and three edited iterations, each phase,
  each trial and each step of the timing phase.
- build: a workspace built cold (each compile from .ninja_log), then with one kernel edited; a KernelBench
  single-file candidate (load_inline; --inline-dir holds NAME-task.py and NAME-model_new.py, KernelBench's few-shot
  examples) built cold and warm, then its two translation units compiled by hand: nvcc with `--time` (each of
  nvcc's phases) and g++ with and without a precompiled torch/extension.h.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eval_cycle import workspace_for  # noqa: E402  (the same workspaces as the iteration benchmark)

CUPTI_PROBE = r"""
import json, time
t = {}
s = time.perf_counter(); import torch; t["import_torch"] = time.perf_counter() - s
s = time.perf_counter(); torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
t["cuda_context"] = time.perf_counter() - s
from torch.profiler import profile, ProfilerActivity
from torch._C._profiler import _ExperimentalConfig
for name, acts, cfg in [(n, a, c) for n, a, c in ORDER]:
    kw = {"experimental_config": _ExperimentalConfig(profile_all_threads=True)} if cfg else {}
    activities = [getattr(ProfilerActivity, x) for x in acts]
    s = time.perf_counter()
    with profile(activities=activities, **kw):
        torch.ones(16, device="cuda").mul_(2)
        torch.cuda.synchronize()
    t[name] = time.perf_counter() - s
print("RESULT" + json.dumps(t))
"""
CUPTI_ORDERS = {
    "cpu_then_cuda": [
        ("cpu_all_threads_1", ["CPU"], True),
        ("cpu_all_threads_2", ["CPU"], True),
        ("cpu_cuda_all_threads_1", ["CPU", "CUDA"], True),
        ("cpu_cuda_all_threads_2", ["CPU", "CUDA"], True),
        ("cpu_cuda_all_threads_3", ["CPU", "CUDA"], True),
    ],
    "cuda_only_first": [
        ("cuda_1", ["CUDA"], False),
        ("cuda_2", ["CUDA"], False),
        ("cpu_cuda_all_threads_1", ["CPU", "CUDA"], True),
    ],
}
CUPTI_ENVS = {"default": {}, "module_loading_eager": {"CUDA_MODULE_LOADING": "EAGER"}}


def cupti() -> dict:
    out = {}
    for env_name, extra in CUPTI_ENVS.items():
        for order_name, order in CUPTI_ORDERS.items():
            code = CUPTI_PROBE.replace("ORDER", repr(order))
            runs = []
            for _ in range(2):
                proc = subprocess.run(
                    [sys.executable, "-c", code], env={**os.environ, **extra}, capture_output=True, text=True
                )
                line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
                runs.append(json.loads(line[0][6:]) if line else {"error": proc.stderr[-2000:]})
            out[f"{env_name}/{order_name}"] = runs
            print(f"cupti {env_name}/{order_name}: {runs}", flush=True)
    return out


class _Stopwatch:
    """Wraps methods of an object's class to add their wall time to a dict (the timing phase's steps)."""

    def __init__(self, cls, names: list[str]):
        self.cls, self.names, self.seconds, self.saved = cls, names, {}, {}

    def __enter__(self):
        for name in self.names:
            original = getattr(self.cls, name)
            self.saved[name] = original

            def wrapped(*a, _original=original, _name=name, **k):
                start = time.monotonic()
                try:
                    return _original(*a, **k)
                finally:
                    self.seconds[_name] = round(self.seconds.get(_name, 0.0) + time.monotonic() - start, 3)

            setattr(self.cls, name, wrapped)
        return self

    def __exit__(self, *exc):
        for name, original in self.saved.items():
            setattr(self.cls, name, original)


def evaluate(scratch: Path, task: str = "softmax", iterations: int = 3) -> dict:
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.evaluator.timing.profile import Profiler

    the_task, ws = workspace_for(task, scratch / f"eval-{task}")
    rows = []
    with Evaluator(the_task, resolve_device("cuda"), EvalOptions(spare_process=True)) as evaluator:
        for k in range(iterations + 1):
            if k:
                kernel = sorted(ws.kernels_dir.glob("*.cu"))[0]
                with open(kernel, "a") as f:
                    f.write(f"// iteration {k}\n")
            with _Stopwatch(Profiler, ["_time", "_kernels", "_confirm", "settle"]) as watch:
                start = time.monotonic()
                v = evaluator.evaluate(ws)
                wall = time.monotonic() - start
            row = {
                "iteration": k,
                "wall_s": round(wall, 3),
                "correct": v.correct,
                "tier": v.tier,
                "phases_s": v.seconds,
                "trials_s": {t.name: t.seconds for t in v.trials},
                "timing_steps_s": watch.seconds,
                "time_ms": v.time_ms,
                "violations": [f"{x.code}: {x.message[:300]}" for x in v.violations],
            }
            rows.append(row)
            print(f"evaluate {task} #{k}: {json.dumps(row)}", flush=True)
    return {"task": task, "rows": rows}


def _ninja_log(build_dir: Path) -> dict:
    """Each target of the last build and its compile time, from ninja's own log."""
    log = build_dir / ".ninja_log"
    if not log.is_file():
        return {}
    out = {}
    for line in log.read_text().splitlines()[1:]:
        start, end, _, target, _ = line.split("\t")
        out[target] = round((int(end) - int(start)) / 1e3, 2)
    return out


def _nvcc_phases(command: str, cwd: Path, scratch: Path) -> dict:
    csv = scratch / "nvcc-time.csv"
    csv.unlink(missing_ok=True)
    start = time.monotonic()
    proc = subprocess.run(command + f" --time {csv}", shell=True, cwd=cwd, capture_output=True, text=True)
    phases = {"wall_s": round(time.monotonic() - start, 2), "returncode": proc.returncode}
    if csv.is_file():
        for row in csv.read_text().splitlines()[1:]:
            cells = [c.strip() for c in row.split(",")]
            if len(cells) >= 8:
                phases[cells[1]] = round(phases.get(cells[1], 0.0) + float(cells[6]) / 1e3, 2)
    return phases


def _timed(command: str, cwd: Path) -> dict:
    start = time.monotonic()
    proc = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True)
    return {"wall_s": round(time.monotonic() - start, 2), "returncode": proc.returncode, "stderr": proc.stderr[-600:]}


def build(scratch: Path, inline_dir: Path | None) -> dict:
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.evaluator.toolchain.extension import build_workspace
    from cudagent.task import load_task
    from cudagent.workspace import Workspace

    device = resolve_device("cuda")
    out: dict = {}
    _, ws = workspace_for("softmax", scratch / "build-softmax")
    cold = build_workspace(ws, device)
    out["workspace_cold"] = {"seconds": round(cold.seconds, 2), "ok": cold.ok, "targets_s": _ninja_log(ws.build_dir)}
    kernel = sorted(ws.kernels_dir.glob("*.cu"))[0]
    with open(kernel, "a") as f:
        f.write("// edited\n")
    warm = build_workspace(ws, device)
    out["workspace_one_kernel_edited"] = {"seconds": round(warm.seconds, 2), "recompiled": warm.recompiled}
    print(f"build workspace: {json.dumps(out)}", flush=True)
    if inline_dir is None:
        return out
    for task_file in sorted(inline_dir.glob("*-task.py")):
        name = task_file.name.removesuffix("-task.py")
        task = load_task(task_file)
        ws = Workspace.create(scratch / f"inline-{name}", task.source)
        shutil.copy(inline_dir / f"{name}-model_new.py", ws.model_new_py)
        row: dict = {}
        with Evaluator(task, device, EvalOptions(timing=False)) as evaluator:
            for label in ("cold", "warm"):
                start = time.monotonic()
                v = evaluator.evaluate(ws)
                row[label] = {
                    "wall_s": round(time.monotonic() - start, 2),
                    "correct": v.correct,
                    "phases_s": v.seconds,
                    "violations": [x.code for x in v.violations],
                }
        ninja = next(_inline_folders(ws, device), None)
        if ninja is not None:
            row["build_ninja"] = ninja.read_text()
            row.update(_by_hand(ninja, scratch / f"hand-{name}"))
        out[f"inline_{name}"] = row
        print(f"build inline {name}: {json.dumps({k: v for k, v in row.items() if k != 'build_ninja'})}", flush=True)
    return out


def _inline_folders(ws, device):
    """The build.ninja files of the machine's builds of the candidate's load_inline calls."""
    from cudagent.evaluator.toolchain.inline import extract, folder_for

    for spec in extract(ws.model_new_py.read_text())[0]:
        ninja = folder_for(spec, device) / "build.ninja"
        if ninja.is_file():
            yield ninja


def _by_hand(ninja: Path, scratch: Path) -> dict:
    """Compile the inline extension's two translation units by hand: nvcc's phases, g++ with and without a PCH."""
    text = ninja.read_text()
    var = {m.group(1): m.group(2) for m in re.finditer(r"^(\w+) = (.*)$", text, flags=re.M)}
    scratch.mkdir(parents=True, exist_ok=True)
    d = ninja.parent
    out: dict = {}
    cu = next(iter(d.glob("*.cu")), None)
    if cu is not None and "nvcc" in var:
        cmd = f"{var['nvcc']} {var.get('cuda_cflags', '')} {var.get('cuda_post_cflags', '')} -c {cu} -o {scratch}/cu.o"
        out["nvcc_phases_s"] = _nvcc_phases(cmd, d, scratch)
    cpp = d / "main.cpp"
    if cpp.is_file():
        cflags = f"{var.get('cflags', '')} {var.get('post_cflags', '')}"
        out["gxx_main_s"] = _timed(f"{var['cxx']} {cflags} -c {cpp} -o {scratch}/main.o", d)
        pch_dir = scratch / "pch" / "torch"
        pch_dir.mkdir(parents=True, exist_ok=True)
        import torch.utils.cpp_extension as ce

        header = next(Path(p) / "torch" / "extension.h" for p in ce.include_paths() if (Path(p) / "torch").is_dir())
        no_name = re.sub(r"-DTORCH_EXTENSION_NAME=\S+", "", cflags)
        out["gxx_pch_create_s"] = _timed(
            f"{var['cxx']} {no_name} -x c++-header {header} -o {pch_dir}/extension.h.gch", d
        )
        name = re.search(r"-DTORCH_EXTENSION_NAME=(\S+)", cflags)
        define = scratch / "name.h"
        define.write_text(f"#define TORCH_EXTENSION_NAME {name.group(1) if name else 'x'}\n")
        out["gxx_main_with_pch_s"] = _timed(
            f"{var['cxx']} -I{scratch / 'pch'} -Winvalid-pch -include torch/extension.h -include {define} {no_name} "
            f"-c {cpp} -o {scratch}/main-pch.o",
            d,
        )
        out["pch_bytes"] = (pch_dir / "extension.h.gch").stat().st_size if (pch_dir / "extension.h.gch").exists() else 0
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "eval_breakdown.json"))
    parser.add_argument("--parts", default="cupti,evaluate,build")
    parser.add_argument("--inline-dir", type=Path)
    args = parser.parse_args()
    import torch

    parts = args.parts.split(",")
    result: dict = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
    }
    with tempfile.TemporaryDirectory(prefix="eval-breakdown-") as tmp:
        if "cupti" in parts:
            result["cupti"] = cupti()
        if "evaluate" in parts:
            result["evaluate"] = evaluate(Path(tmp))
        if "build" in parts:
            result["build"] = build(Path(tmp), args.inline_dir)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
