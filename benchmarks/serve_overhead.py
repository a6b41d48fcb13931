"""Benchmark: what `cudagent serve` adds to an evaluation, and many episodes against one service.

1. Overhead per evaluation: a client (the RemoteEvaluator of `--evaluator`) sends the same snapshot N times; per
   call, overhead = the client's wall time minus the evaluation's own work as the worker measured it (`work_s`:
   the evaluator, from the worker's handler to its answer). What remains is the HTTP round trips (client to front,
   front to worker), auth, JSON and base64, routing and queueing. The snapshot is the example axpby solution with
   a syntax error added, so the evaluator's work is short and the figure is not drowned in it. Target: median and
   p99 under 20 ms.
2. 64 concurrent scripted episodes (write, verify, finish) against one service from one event loop: wall time and
   the peak resident memory of the service's process tree (front and workers) above its idle figure.

    python benchmarks/serve_overhead.py [--calls 300] [--episodes 64] [--rounds 3] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cudagent.evaluator.remote import EvaluatorPool  # noqa: E402
from cudagent.task import Task  # noqa: E402
from tests.serve.service_proc import TOKEN, ServiceProcess  # noqa: E402
from tests.serve.test_serve import _run_many, _tree_rss_mb  # noqa: E402

TASK = (ROOT / "examples" / "tasks" / "axpby.py").read_text()
SOLUTION = ROOT / "examples" / "solutions" / "cpu" / "axpby"


def snapshot() -> dict[str, bytes]:
    files = {"model_new.py": (SOLUTION / "model_new.py").read_bytes() + b"\ndef broken(:\n"}
    for path in (SOLUTION / "kernels").iterdir():
        files[f"kernels/{path.name}"] = path.read_bytes()
    return files


async def overhead(url: str, calls: int) -> list[dict]:
    pool = EvaluatorPool([url], TOKEN)
    port = pool.port(Task("axpby", TASK, None))
    await port.open()
    snap, rows = snapshot(), []
    for i in range(calls + 5):
        start = time.perf_counter()
        verdict = await port.evaluate(snap, timing=False)
        wall = time.perf_counter() - start
        assert not verdict.correct
        if i >= 5:  # warm-up: connection pools, first imports in the worker
            rows.append({"wall_ms": wall * 1e3, "work_ms": port.last_work["work_s"] * 1e3})
    await port.close()
    return rows


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "serve_overhead.json"))
    args = parser.parse_args()
    results = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_avg": os.getloadavg(),
        },
        "rounds": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            with ServiceProcess(Path(tmp) / f"svc{r}") as svc:
                rows = asyncio.run(overhead(svc.url, args.calls))
                over = [x["wall_ms"] - x["work_ms"] for x in rows]
                idle = _tree_rss_mb(svc.proc.pid)
                peak, stop = [idle], threading.Event()

                def sample(pid=svc.proc.pid, peak=peak, stop=stop):
                    while not stop.is_set():
                        peak[0] = max(peak[0], _tree_rss_mb(pid))
                        time.sleep(0.05)

                sampler = threading.Thread(target=sample, daemon=True)
                sampler.start()
                start = time.perf_counter()
                done = asyncio.run(_run_many(Path(tmp) / f"eps{r}", svc.url, args.episodes))
                wall = time.perf_counter() - start
                stop.set()
                sampler.join()
                wrong = [i for i, obs in done if f"model_new.py:{i + 3}:" not in obs]
                row = {
                    "overhead_ms": {
                        "median": round(statistics.median(over), 2),
                        "p99": round(percentile(over, 0.99), 2),
                        "min": round(min(over), 2),
                        "max": round(max(over), 2),
                    },
                    "evaluation_work_ms_median": round(statistics.median(x["work_ms"] for x in rows), 2),
                    "calls": len(rows),
                    "episodes": {
                        "count": args.episodes,
                        "wall_s": round(wall, 2),
                        "service_rss_idle_mb": round(idle, 1),
                        "service_rss_peak_mb": round(peak[0], 1),
                        "verdicts_for_the_wrong_episode": len(wrong),
                    },
                }
                print(json.dumps(row), flush=True)
                results["rounds"].append(row)
    medians = [r["overhead_ms"]["median"] for r in results["rounds"]]
    p99s = [r["overhead_ms"]["p99"] for r in results["rounds"]]
    results["summary"] = {
        "overhead_median_ms_range": [min(medians), max(medians)],
        "overhead_p99_ms_range": [min(p99s), max(p99s)],
        "target_ms": 20,
        "meets_target": max(p99s) < 20,
        "episodes_wall_s_range": [
            min(r["episodes"]["wall_s"] for r in results["rounds"]),
            max(r["episodes"]["wall_s"] for r in results["rounds"]),
        ],
    }
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results["summary"]))


if __name__ == "__main__":
    main()
