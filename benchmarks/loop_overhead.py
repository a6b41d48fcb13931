"""Benchmark: the chat loop's own cost per turn (chat driver, episode, recorders), without the model's time and
the tools' time.

A replay policy answers instantly with a fixed sequence of calls (a file write every other turn, so half the turns
commit, and reads between); the loop runs 200 turns on the CPU. Per turn, overhead = the time between two
consecutive turn events (each sent after the turn is committed and written) minus the reply's time and the tools'
time: limits, prompt rendering, elision, the git commit, the trajectory write (fsync'ed), events. Target: under
50 ms.

    python benchmarks/loop_overhead.py [--turns 200] [--out benchmarks/results/loop_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASK = (ROOT / "examples" / "tasks" / "axpby.py").read_text()


class ReplayPolicy:
    """Answers at once with the next call of a list: what a loop benchmark needs, and nothing of a model."""

    model = "replay"
    action_format = "tools"
    max_tokens = None
    context_tokens = None

    def __init__(self, turns: int):
        self.calls = []
        for i in range(turns - 1):
            if i % 2 == 0:
                body = "\n".join(f"// line {j} of version {i}" for j in range(60))
                self.calls.append(("write_file", {"path": f"kernels/k{i % 6}.cu", "content": body}))
            else:
                self.calls.append(("read_file", {"path": "model.py"}))
        self.calls.append(("finish", {"summary": "done"}))

    def prepare(self):
        pass

    def describe(self):
        return {"kind": "replay", "model": self.model}

    async def reply(self, messages, tools):
        from cudagent.agent.policy import PolicyReply, ToolCall, Usage

        name, args = self.calls.pop(0)
        call = ToolCall(id=f"c{len(self.calls)}", name=name, arguments=args, raw_arguments=json.dumps(args))
        msg = {
            "role": "assistant",
            "content": "next step",
            "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": name, "arguments": call.raw_arguments}}
            ],
        }
        return PolicyReply("next step", [call], Usage(1000, 50), msg, seconds=0.0)


class StampedEvents:
    """JSON events to a sink, with the perf_counter time of every turn event kept."""

    def __init__(self, sink):
        from cudagent.agent.ui import JsonEvents

        self.inner = JsonEvents(sink)
        self.stamps: list[float] = []

    def event(self, event: dict) -> None:
        self.inner.event(event)
        if event.get("event") == "turn":
            self.stamps.append(time.perf_counter())

    def summary(self, summary: dict) -> None:
        self.inner.summary(summary)

    def close(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "loop_overhead.json"))
    args = parser.parse_args()
    from cudagent.agent.episode import EpisodeLimits
    from cudagent.agent.runner import PolicySettings, RunOptions, start_run
    from cudagent.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(home=Path(tmp) / "home")
        task = Path(tmp) / "axpby.py"
        task.write_text(TASK)
        with open(os.devnull, "w") as sink:
            reporter = StampedEvents(sink)
            start = time.perf_counter()
            summary = start_run(
                task,
                PolicySettings(),
                RunOptions(
                    settings=settings, device="cpu", limits=EpisodeLimits(max_turns=args.turns), final_evaluation=False
                ),
                reporter,
                policy=ReplayPolicy(args.turns),
            )
            total = time.perf_counter() - start
        lines = [json.loads(x) for x in (Path(summary["run_dir"]) / "trajectory.jsonl").read_text().splitlines()]
    turns = [t for t in lines if t["kind"] == "turn"]
    stamps = reporter.stamps  # turn events: turn k's stamp follows its write; the gaps hold whole turns
    turns = turns[1:]
    overhead = [
        ((b - a) - t["reply"]["seconds"] - sum(x["seconds"] for x in t["actions"])) * 1e3
        for a, b, t in zip(stamps, stamps[1:], turns)
    ]
    committing = [o for o, t in zip(overhead, turns) if t["commit"]]
    quiet = [o for o, t in zip(overhead, turns) if not t["commit"]]
    out = {
        "turns": len(turns),
        "exit_reason": summary["exit_reason"],
        "run_total_s": round(total, 2),
        "overhead_ms": {
            "median": statistics.median(overhead),
            "p90": sorted(overhead)[int(0.9 * len(overhead))],
            "max": max(overhead),
            "mean": statistics.fmean(overhead),
        },
        "overhead_ms_turns_with_commit": statistics.median(committing) if committing else None,
        "overhead_ms_turns_without_commit": statistics.median(quiet) if quiet else None,
        "last_10_turns_median_ms": statistics.median(overhead[-10:]),
        "target_ms": 50,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(
        f"loop overhead per turn over {len(turns)} turns: median {out['overhead_ms']['median']:.1f} ms, "
        f"p90 {out['overhead_ms']['p90']:.1f} ms, max {out['overhead_ms']['max']:.1f} ms "
        f"(with a commit {out['overhead_ms_turns_with_commit']:.1f} ms) -> {args.out}"
    )


if __name__ == "__main__":
    main()
