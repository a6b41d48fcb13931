"""Region times a ranking can trust, on a busy machine too.

    parts, whole, note = time_in_rounds(calls, whole_call, sync)

A region measured alone in one stretch of 20 calls takes whatever the machine did meanwhile: on a shared two-core
CPU the same RMSNorm region measured 0.25 ms once and 120 ms minutes later (another process's burst, OpenMP threads
waiting out a scheduler slice: the bad values sat near multiples of 8 ms). So each region is timed in ROUNDS short
rounds, interleaved with every other region and with the whole model's call, and its figure is the median of its
rounds: a burst spoils a round, not the figure. A region whose rounds still spread over SPREAD_AGAIN times is timed
in as many rounds again. Then the parts are checked against the whole: the regions' figures adding up to more than
PARTS_OVER_WHOLE times one call of the whole model (each region alone pays a call's Python overhead, so some excess
is expected) are timed again, interleaved; if they still do, the figures stand with a note saying the ranking is
uncertain. Every figure keeps its rounds' range (the table's spread).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

ROUNDS = 5
CALLS_PER_ROUND = 5
WARMUP_CALLS = 3
SPREAD_AGAIN = 3.0
PARTS_OVER_WHOLE = 2.0


@dataclass
class Rounds:
    """One thing's time per call in each round (the median of the round's calls), in ms."""

    ms: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.ms)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.ms), max(self.ms)


def time_in_rounds(
    calls: list[Callable], whole: Callable | None, sync: Callable = lambda: None, clock: Callable = time.perf_counter
) -> tuple[list[Rounds], Rounds | None, str | None]:
    """(each call's Rounds, the whole's Rounds or None, a note when the parts disagree with the whole or None)."""

    def per_call(fn) -> float:
        times = []
        for _ in range(CALLS_PER_ROUND):
            sync()
            start = clock()
            fn()
            sync()
            times.append((clock() - start) * 1e3)
        return statistics.median(times)

    for fn in [*calls, *([whole] if whole else [])]:
        for _ in range(WARMUP_CALLS):
            fn()
    parts = [Rounds([]) for _ in calls]
    whole_rounds = Rounds([]) if whole else None

    def rounds(which: list[int], n: int) -> None:
        for r in range(n):
            if whole_rounds is not None:
                whole_rounds.ms.append(per_call(whole))
            for i in which[r % len(which) :] + which[: r % len(which)] if which else []:
                parts[i].ms.append(per_call(calls[i]))

    everyone = list(range(len(calls)))
    rounds(everyone, ROUNDS)
    spread_out = [i for i, p in enumerate(parts) if p.ms and p.spread[1] > SPREAD_AGAIN * p.spread[0]]
    if spread_out:
        rounds(spread_out, ROUNDS)
    if whole_rounds is None or not calls:
        return parts, whole_rounds, None
    if sum(p.median for p in parts) > PARTS_OVER_WHOLE * whole_rounds.median:
        rounds(everyone, ROUNDS)
    total, one_call = sum(p.median for p in parts), whole_rounds.median
    note = None
    if total > PARTS_OVER_WHOLE * one_call:
        note = (
            f"the regions, each timed alone, add up to {total:.3f} ms against {one_call:.3f} ms for one call of the "
            "whole model, timed again and still: the machine was busy, or the regions run much slower alone than "
            "inside the model (a call's own overhead each); take the ranking as uncertain"
        )
    return parts, whole_rounds, note
