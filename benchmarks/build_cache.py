"""Benchmark: a workspace build with the machine's compiler cache cold, then the same sources in a second
workspace (another episode of the same task), then edits, each run with a cache of its own.

    python benchmarks/build_cache.py [--device cpu|cuda] [--task axpby] [--runs 3] [--out FILE.json]

Per run, in order: the first workspace's build (every unit compiled, and stored); the same sources in another
workspace with the cache's direct lookups off (every C++ unit preprocessed for its key, then a copy); in a second
(every C++ unit a copy found by its direct key, unpreprocessed; on a GPU the .cu kernels still compile), with the
CPU seconds of these three; the kernel unit that begins by including torch edited there (it
compiles again: the second miss of its first header, so the precompiled header of pch.py is made here); edited
again (compiled with that header); and the same edit with every cache off (CUDAGENT_BUILD_CACHE=0), what each
edit cost before.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from run_summary import write_run_summary  # noqa: E402


def workspace(task, solution: Path, root: Path):
    from cudagent.workspace import Workspace

    ws = Workspace.create(root, task.source)
    shutil.copy(solution / "model_new.py", ws.model_new_py)
    shutil.copytree(solution / "kernels", ws.kernels_dir, dirs_exist_ok=True)
    return ws


def timed_build(ws, device, cpu: dict | None = None, name: str = "") -> float:
    """The build's wall seconds; `cpu[name]`: the CPU seconds of every process it ran (ninja, the compiler cache's
    wrapper, the preprocessor and compiler), as the build's waited-for children."""
    from cudagent.evaluator.toolchain.extension import build_workspace

    start, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    result = build_workspace(ws, device)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert result.ok, result.errors
    if cpu is not None:
        cpu[name] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2)
    return round(time.monotonic() - start, 2)


def one_run(task, solution: Path, device, scratch: Path) -> dict:
    os.environ["CUDAGENT_CACHE_DIR"] = str(scratch / "cache")
    cpu: dict[str, float] = {}
    cold = timed_build(workspace(task, solution, scratch / "first"), device, cpu, "cold")
    os.environ["CUDAGENT_BUILD_CACHE_DIRECT"] = "0"
    try:  # before direct lookups (manifest.py): every unit preprocessed for its key
        preprocessed = timed_build(workspace(task, solution, scratch / "third"), device, cpu, "preprocessed")
    finally:
        del os.environ["CUDAGENT_BUILD_CACHE_DIRECT"]
    second = workspace(task, solution, scratch / "second")
    warm = timed_build(second, device, cpu, "direct")
    from cudagent.evaluator.toolchain.pch import leading_system_include

    units = sorted(p for p in second.kernels_dir.iterdir() if p.suffix == ".cpp")
    kernel = next((p for p in units if leading_system_include(p.read_text())), units[0])  # the torch-including one

    def edited(n: int) -> float:
        kernel.write_text(kernel.read_text() + f"\nstatic int cudagent_benchmark_edit{n} = {n};\n")
        return timed_build(second, device)

    result = {"cold_s": cold, "same_sources_other_workspace_s": warm, "same_sources_preprocessed_s": preprocessed}
    result |= {f"cpu_{k}_s": v for k, v in cpu.items()}
    result["edit_making_the_pch_s"] = edited(1)
    result["edit_with_the_pch_s"] = edited(2)
    os.environ["CUDAGENT_BUILD_CACHE"] = "0"
    try:
        result["edit_without_caches_s"] = edited(3)
    finally:
        del os.environ["CUDAGENT_BUILD_CACHE"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--task", default="axpby")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "build_cache.json"))
    args = parser.parse_args()
    from cudagent.device.info import resolve_device
    from cudagent.task import load_task

    device = resolve_device(args.device)
    task = load_task(ROOT / "examples" / "tasks" / f"{args.task}.py")
    solution = ROOT / "examples" / "solutions" / ("cuda" if device.is_cuda else "cpu") / args.task
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="build-cache-") as tmp:
            runs.append(one_run(task, solution, device, Path(tmp)))
        print(json.dumps(runs[-1]), flush=True)
    write_run_summary(args.out, runs, __doc__.strip().splitlines()[0], device=device.name, task=args.task)


if __name__ == "__main__":
    main()
