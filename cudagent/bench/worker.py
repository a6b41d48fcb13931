"""One bench task, in a process of its own: the null-candidate check, then the evaluation of the given solution
(or an agent run), written as one JSON object to the file the bench names. A crash or a hang here costs the bench
this task only.

    python -m cudagent.bench.worker --task T --result R.json --device cuda [--solution S | --optimize SETTINGS.json]
                                    [--evaluator URL,...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
import traceback
from pathlib import Path

from cudagent.device.share import device_share, waited_s
from cudagent.resultlog import write_json_atomic
from cudagent.taskpool import mentions_out_of_memory


def run(args) -> dict:
    from cudagent.evaluator.audit.nullcheck import null_candidates
    from cudagent.evaluator.evaluator import EvalOptions
    from cudagent.evaluator.where import evaluators
    from cudagent.settings import Settings
    from cudagent.task import load_task, validate_task

    out: dict = {"task": str(args.task)}
    phases = out["phases_s"] = {"start": round(time.monotonic() - args.started, 2)}
    clock = _Clock(phases)
    task = load_task(Path(args.task))
    where = evaluators(args.evaluator, device=args.device, options=EvalOptions.from_settings(Settings.from_env()))
    if args.evaluator:
        return {**out, **_remote(args, task, where)}
    device = where.device_info
    out["device"] = device.to_dict()
    with _reserved(task, device, args, out):
        with clock("validate"), device_share(exclusive=False):
            validate_task(task, device.kind)
        with clock("null_check"), device_share(exclusive=False):
            out["null_candidates"] = null_candidates(task, device.kind)
        if args.baselines_only:
            with clock("baselines"):
                return {**out, **_baselines(task, device)}
        if args.optimize:
            return {**out, **_optimize(args, device)}
        if args.solution is None:
            return {**out, "correct": False, "tier": -1, "error": "no solution for this task", "missing": True}
        with clock("evaluate"):
            verdict = _judge(where.port(task, null_candidates=out["null_candidates"]), task, args.solution)
        return {**out, **_kept(verdict)}


def _judge(port, task, solution: str):
    """The solution (a workspace or a KernelBench-format file) judged with timing through the evaluator port."""
    import asyncio

    from cudagent.evaluator.port import snapshot_of
    from cudagent.workspace import resolve_candidate, workspace_for

    snapshot = snapshot_of(workspace_for(resolve_candidate(Path(solution)), task.source))

    async def judge():
        await port.open()
        try:
            return await port.evaluate(snapshot, timing=True)
        finally:
            await port.close()

    return asyncio.run(judge())


@contextlib.contextmanager
def _reserved(task, device, args, out: dict):
    """The task's expected device memory reserved among the tasks sharing its GPU (device/memory.py), for all of
    its work on the device; on the CPU, or with one task per GPU, nothing is reserved."""
    from cudagent.device.memory import device_budget_bytes, expected_task_bytes, memory_reservation
    from cudagent.device.share import LOCK_ENV
    from cudagent.evaluator.timing.measure import sets_for

    if not device.is_cuda or not os.environ.get(LOCK_ENV):
        yield
        return
    sizes = task.sizes_on_meta()
    budget = device_budget_bytes()
    need = budget  # not measurable on the meta device: counted as taking the device alone
    if sizes is not None:
        sets = sets_for(sizes.inputs, "cuda")
        need = expected_task_bytes(sizes.params, sizes.inputs, sizes.output, sets, not args.baselines_only)
    out["memory_reserved_gb"] = round(need / 2**30, 2)
    start = time.monotonic()
    with memory_reservation(need, budget):
        out["phases_s"]["memory_wait"] = round(time.monotonic() - start, 2)
        yield


class _Clock:
    """`with clock(name):` adds the block's wall time to phases[name]."""

    def __init__(self, phases: dict):
        self.phases = phases

    @contextlib.contextmanager
    def __call__(self, name: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = round(self.phases.get(name, 0.0) + time.monotonic() - start, 2)


def _baselines(task, device) -> dict:
    """The reference alone: eager and torch.compile timed as every evaluation of this task would (and cached for
    them); no candidate."""
    from cudagent.evaluator.evaluator import EvalOptions
    from cudagent.evaluator.timing.baselines import Baselines

    options = EvalOptions()
    baselines = Baselines(task, device, options.compile_mode, options.plan)
    try:
        got = baselines.get()
    finally:
        baselines.close()
    times = {t: (b.compared_ms if b else None) for t, b in got.items()}
    return {
        "baselines_only": True,
        "correct": None,
        "tier": None,
        "time_ms": {**times, "candidate": None},
        "device_ms": {t: (b.measurement.device.median if b else None) for t, b in got.items()},
        "host_bound": {t: _host_bound(b) for t, b in got.items()},
        "error": "; ".join(baselines.notes) or None,
        "notes": baselines.notes,
    }


def _host_bound(baseline) -> bool | None:
    """Whether a call's time is its host enqueue time rather than its device time (the sample is the larger)."""
    if baseline is None:
        return None
    return baseline.measurement.stats.median > 1.05 * baseline.measurement.device.median


def _kept(verdict) -> dict:
    v = verdict.to_dict()
    keep = (
        "correct",
        "tier",
        "violations",
        "error",
        "max_abs_error",
        "time_ms",
        "speedup_vs_eager",
        "speedup_vs_compile",
        "seconds",
        "flags",
        "notes",
    )
    return {k: v[k] for k in keep}


def _remote(args, task, where) -> dict:
    """The task judged on `cudagent serve` services (--evaluator): the service checks it for null candidates."""
    import asyncio

    if args.optimize:
        port = where.port(task)
        asyncio.run(port.open())
        device = port.device()
        asyncio.run(port.close())
        return {"device": device, **_optimize(args, None, where.urls)}
    if args.solution is None:
        return {"correct": False, "tier": -1, "error": "no solution for this task", "missing": True}
    port = where.port(task)
    verdict = _judge(port, task, args.solution)
    return {
        "device": port.device(),
        "null_candidates": verdict.null_candidates,
        "evaluator": where.urls,
        **_kept(verdict),
    }


def _optimize(args, device, evaluator_urls: list[str] | None = None) -> dict:
    from cudagent.agent.episode import EpisodeLimits
    from cudagent.agent.runner import PolicySettings, RunOptions, start_run
    from cudagent.agent.ui import JsonEvents
    from cudagent.settings import Settings

    settings = json.loads(Path(args.optimize).read_text())
    limits = EpisodeLimits(**settings.pop("limits", {}))
    env = Settings.from_env()
    options = RunOptions(
        settings=env, device=device.kind if device else "auto", limits=limits, evaluator_urls=evaluator_urls
    )
    with open(os.devnull, "w") as sink:
        summary = start_run(
            Path(args.task), PolicySettings(**settings, prices_per_mtok=env.prices_per_mtok), options, JsonEvents(sink)
        )
    best, final = summary.get("best"), summary.get("final") or {}
    return {
        "run_id": summary["run_id"],
        "turns": summary["turns"],
        "exit_reason": summary["exit_reason"],
        "correct": bool(best and final.get("correct")),
        "tier": best["tier"] if best and final.get("correct") else -1,
        "time_ms": final.get("time_ms"),
        "speedup_vs_eager": final.get("speedup_vs_eager"),
        "speedup_vs_compile": final.get("speedup_vs_compile"),
        "error": summary.get("error"),
        "violations": final.get("violations", []),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="cudagent.bench.worker")
    parser.add_argument("--task", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--solution")
    parser.add_argument("--optimize", help="a JSON file of policy settings and limits: run the agent instead")
    parser.add_argument("--evaluator", help="cudagent serve URLs, comma-separated: evaluate there")
    parser.add_argument("--baselines-only", action="store_true", help="time the reference only, no candidate")
    parser.add_argument("--started", type=float, help="the runner's time.monotonic() when it started this process")
    args = parser.parse_args()
    start = time.monotonic()
    args.started = args.started if args.started is not None else start
    try:
        result = run(args)
    except Exception as exc:  # noqa: BLE001  (whatever goes wrong is this task's result, never the bench's)
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        result = {
            "task": args.task,
            "correct": False,
            "tier": -1,
            "error": message,
            "trace": traceback.format_exc()[-3000:],
        }
    result["out_of_memory"] = mentions_out_of_memory(f"{result.get('error') or ''} {result.get('trace') or ''}")
    result["wall_s"] = round(time.monotonic() - start, 2)
    result["device_wait_s"] = round(waited_s(), 2)
    write_json_atomic(args.result, result)


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    main()
