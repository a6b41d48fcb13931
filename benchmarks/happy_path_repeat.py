"""The scripted happy path (write a kernel, compile, verify, finish) as `cudagent optimize` runs it, many times in a row
beside a CPU load: what used to fail on a loaded 2-core machine (CPython 3.11's ast race between the evaluator's
build thread and the agent's thread: `SystemError: AST constructor recursion depth mismatch`) must not fail once.

    python benchmarks/happy_path_repeat.py --runs 20 --load 2 --out benchmarks/results/boundary/happy_path.log

Each run: a fresh home, a real HTTP model server replaying the steps, the real evaluator on the CPU. A run counts as
passed when it exits 0, ends `finished`, has a tier-1 best kernel and no `SystemError` appears anywhere in its
output or trajectory.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.agent.episodes import FINISH, SOLVE, cli_env, cudagent, summary, write_task  # noqa: E402
from tests.agent.script_server import ScriptedServer, from_list  # noqa: E402


def _burn(stop) -> None:
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1000003


def one(work: Path) -> tuple[bool, str]:
    task = write_task(work / "task")
    with ScriptedServer(from_list(SOLVE + [FINISH])) as server:
        start = time.monotonic()
        proc = cudagent(["optimize", str(task), "--device", "cpu", "--json", "--no-final-check"],
                        cli_env(work / "home", server.url))  # fmt: skip
        seconds = time.monotonic() - start
    trajectories = "".join(p.read_text() for p in (work / "home").rglob("trajectory.jsonl"))
    everything = proc.stdout + proc.stderr + trajectories
    try:
        s = summary(proc.stdout)
        outcome = f"exit {proc.returncode}, {s['exit_reason']}, best tier {(s['best'] or {}).get('tier')}"
        ok = proc.returncode == 0 and s["exit_reason"] == "finished" and (s["best"] or {}).get("tier") == 1
    except AssertionError:
        outcome, ok = f"exit {proc.returncode}, no summary: {proc.stderr.strip()[-300:]}", False
    if "SystemError" in everything:
        ok, outcome = False, outcome + ", SystemError seen"
    return ok, f"{outcome}, {seconds:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--load", type=int, default=2, help="busy processes beside the runs")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    lines = [
        f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {platform.node()} Python {platform.python_version()}"
        f" ({sys.implementation.name}), {os.cpu_count()} cores, {args.load} busy processes beside the runs"
    ]
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(args.load)]
    for b in burners:
        b.start()
    passed = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ.setdefault("CUDAGENT_CACHE_DIR", str(Path(tmp) / "cache"))
            for i in range(args.runs):
                ok, outcome = one(Path(tmp) / f"run{i}")
                passed += ok
                lines.append(f"run {i + 1:2d}: {'ok  ' if ok else 'FAIL'} {outcome}")
                print(lines[-1], flush=True)
    finally:
        stop.set()
        for b in burners:
            b.join()
    lines.append(f"# {passed} of {args.runs} passed")
    print(lines[-1])
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(lines) + "\n")
    sys.exit(0 if passed == args.runs else 1)


if __name__ == "__main__":
    main()
