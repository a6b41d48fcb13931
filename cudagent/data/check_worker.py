"""The filters that run a task, in a process of its own (the dataset pipeline starts one per task, with a time and a
memory limit), writing one JSON object: {"dropped_by": FILTER or null, "why", "runtime_ms"}.

    python -m cudagent.data.check_worker --task T --device cpu|cuda --runtime-ms LO,HI --compile inductor|aot_eager|off
                                         --result R.json
"""

from __future__ import annotations

import argparse
import traceback
from pathlib import Path

from cudagent.device.share import alone, device_share
from cudagent.resultlog import write_json_atomic
from cudagent.taskpool import mentions_out_of_memory

RUNTIME_CALLS = 7


def check(args) -> dict:
    """The running filters, cheapest and most often failing first: loads and runs (with determinism), the runtime
    window (a few eager calls; most composed tasks that fail, fail here), then torch.compile's agreement (seconds of
    compilation) and the null candidates."""
    from cudagent.data.filters import runtime_reason
    from cudagent.evaluator.audit.nullcheck import null_candidates

    device = args.device
    if device == "cuda":
        import torch

        # get_inputs() and Model() draw on the GPU: a task here has inputs of up to 1 GiB, drawn 7 times (validation,
        # the run, the null candidates), each a second of host work and a copy when drawn on the host
        torch.set_default_device("cuda")
    with device_share(exclusive=False):  # other workers may check tasks on this device meanwhile
        loaded = _load_and_run(args, device)
        if isinstance(loaded, dict):
            return loaded
        task, model, inputs, expected = loaded
    with device_share(exclusive=True):  # timed alone on the device
        median = _median_ms(model, inputs, device)
    why = runtime_reason(median, args.window)
    if why:
        return {"dropped_by": "runtime", "why": why, "runtime_ms": round(median, 4)}
    # torch.compile outside the device share: seconds of CPU codegen and one forward pass on the GPU. Held as a
    # check, it made every timing wait for the longest compile in progress while the turnstile kept new checks out
    # (a convoy: on the H100, 10 workers finished a task every 5 s, each worker 56 s per task, most of it waiting);
    # a timing's median of 7 calls shrugs off one overlapping forward pass.
    why = _compile_disagrees(args, model, inputs, expected)
    if why:
        return {"dropped_by": "compile", "why": why, "runtime_ms": round(median, 4)}
    del expected
    with device_share(exclusive=False):
        nulls = null_candidates(task, device)
        if nulls:
            why = f"the null candidate(s) {', '.join(nulls)} pass"
            return {"dropped_by": "degenerate", "why": why, "runtime_ms": round(median, 4)}
    return {"dropped_by": None, "why": None, "runtime_ms": round(median, 4)}


def _load_and_run(args, device: str):
    """Load, validate (runs twice, deterministic) and run once: (task, model, inputs, output), or the drop."""
    import torch

    from cudagent.errors import CudagentError
    from cudagent.task import load_task, validate_task

    try:
        task = load_task(Path(args.task))
        validate_task(task, device, timeout_s=args.task_timeout)
    except CudagentError as exc:
        return {"dropped_by": "runs", "why": exc.message}
    model = task.build_model(1, device)
    inputs = task.make_inputs(2, device)
    with torch.no_grad():
        expected = task.run(model, inputs)
    return task, model, inputs, expected


def _median_ms(model, inputs: list, device: str) -> float:
    """The task's time per call as the evaluator's timing loop measures it (evaluator/measure.py: the same clock as
    every verdict), over a few samples: the runtime window needs the order of magnitude, not a tier's precision."""
    import statistics

    import torch

    from cudagent.evaluator.timing.measure import Plan, measure

    plan = Plan(min_samples=RUNTIME_CALLS, min_seconds=0.0, max_samples=RUNTIME_CALLS, warmup_calls=2)
    timed = measure(lambda k: model(*inputs), 1, torch.device(device), plan)
    return statistics.median(timed["ms"])


def _compile_disagrees(args, model, inputs: list, expected) -> str | None:
    """Why torch.compile's output is not eager's (or compilation failed); None when they agree or the check is off."""
    import torch

    from cudagent.evaluator.compare import Tolerance, compare

    if args.compile == "off":
        return None
    try:
        compiled = torch.compile(model, backend=args.compile)
        with torch.no_grad():
            got = compiled(*inputs)
    except Exception as exc:  # noqa: BLE001  (whatever torch.compile raises drops the task, with its reason)
        return f"torch.compile failed: {type(exc).__name__}: {str(exc)[:300]}"
    result = compare(expected, got, Tolerance(), check_device=False)
    return None if result.ok else f"torch.compile disagrees with eager: {result.violations[0].message}"


def _attempt(fn, args) -> dict:
    try:
        return fn(args)
    except Exception as exc:  # noqa: BLE001  (a task that breaks the checker is dropped with what happened)
        return {"dropped_by": "runs", "why": f"{type(exc).__name__}: {exc}"[:500], "trace": traceback.format_exc()}


def main() -> None:
    parser = argparse.ArgumentParser(prog="cudagent.data.check_worker")
    parser.add_argument("--task", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runtime-ms", default="0,1e9")
    parser.add_argument("--compile", default="inductor")
    parser.add_argument("--task-timeout", type=float, default=120.0)
    parser.add_argument("--started", type=float, help="the pool's time.monotonic() when it started this process")
    args = parser.parse_args()
    lo, hi = (float(x) for x in args.runtime_ms.split(","))
    args.window = (lo, hi)
    result = _attempt(check, args)
    if result.get("dropped_by") == "runs" and mentions_out_of_memory(result.get("why") or ""):
        result["out_of_memory"] = True  # the task pool runs it again with the device to itself, unless it was
        if alone():
            result["why"] = "needs more device memory than the device has, alone on it: " + result["why"]
    write_json_atomic(args.result, result)


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    main()
