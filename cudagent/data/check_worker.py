"""The filters that run a task, in a process of its own (the dataset pipeline starts one per task, with a time and a
memory limit), writing one JSON object: {"dropped_by": FILTER or null, "why", "runtime_ms"}.

    python -m cudagent.data.check_worker --task T --device cpu|cuda --runtime-ms LO,HI --compile inductor|aot_eager|off
                                         --result R.json
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import statistics
import time
import traceback
from pathlib import Path

from cudagent.resultlog import write_json_atomic

RUNTIME_CALLS = 7


def check(args) -> dict:
    import torch

    from cudagent.data.filters import runtime_reason
    from cudagent.evaluator.nullcheck import null_candidates

    device = args.device
    with device_share(exclusive=False):  # other workers may check tasks on this device meanwhile
        result = _run_and_compare(args, device)
        if isinstance(result, dict):
            return result
        task, model, inputs = result
        nulls = null_candidates(task, device)
        if nulls:
            return {"dropped_by": "degenerate", "why": f"the null candidate(s) {', '.join(nulls)} pass"}
    times = []
    with device_share(exclusive=True), torch.no_grad():  # timed alone on the device
        for i in range(RUNTIME_CALLS + 2):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            model(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= 2:  # warm-up: allocator, cuDNN/cuBLAS heuristics
                times.append((time.perf_counter() - start) * 1e3)
    median = statistics.median(times)
    why = runtime_reason(median, args.window)
    return {"dropped_by": "runtime" if why else None, "why": why, "runtime_ms": round(median, 4)}


def _run_and_compare(args, device: str):
    """Load, validate, run, and compare torch.compile's output with eager's: (task, model, inputs), or the drop."""
    import torch

    from cudagent.errors import CudagentError
    from cudagent.evaluator.compare import Tolerance, compare
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
    if args.compile != "off":
        try:
            compiled = torch.compile(model, backend=args.compile)
            with torch.no_grad():
                got = compiled(*inputs)
        except Exception as exc:  # noqa: BLE001  (whatever torch.compile raises drops the task, with its reason)
            return {"dropped_by": "compile", "why": f"torch.compile failed: {type(exc).__name__}: {str(exc)[:300]}"}
        result = compare(expected, got, Tolerance(), check_device=False)
        if not result.ok:
            why = f"torch.compile disagrees with eager: {result.violations[0].message}"
            return {"dropped_by": "compile", "why": why}
    return task, model, inputs


@contextlib.contextmanager
def device_share(exclusive: bool):
    """A reader-writer lock on the device among the pipeline's workers (CUDAGENT_DEVICE_LOCK names its file):
    checks share it, a timing has it alone, and a waiting timing lets no new check in ahead of it (a turnstile)."""
    path = os.environ.get("CUDAGENT_DEVICE_LOCK")
    if not path:
        yield
        return
    with open(path + ".turnstile", "a") as turnstile, open(path, "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def main() -> None:
    parser = argparse.ArgumentParser(prog="cudagent.data.check_worker")
    parser.add_argument("--task", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runtime-ms", default="0,1e9")
    parser.add_argument("--compile", default="inductor")
    parser.add_argument("--task-timeout", type=float, default=120.0)
    args = parser.parse_args()
    lo, hi = (float(x) for x in args.runtime_ms.split(","))
    args.window = (lo, hi)
    try:
        result = check(args)
    except Exception as exc:  # noqa: BLE001  (a task that breaks the checker is dropped with what happened)
        result = {"dropped_by": "runs", "why": f"{type(exc).__name__}: {exc}"[:500], "trace": traceback.format_exc()}
    write_json_atomic(args.result, result)


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    main()
