"""When a verified kernel is better than the best so far: a higher tier, or in the same tier at least SPEEDUP_STEP
faster against the weaker of its two baselines (timing noise must not make a "new best" of the same kernel)."""

from __future__ import annotations

SPEEDUP_STEP = 1.01


def is_better(new: dict, old: dict | None) -> bool:
    if old is None:
        return True
    if new["tier"] != old["tier"]:
        return new["tier"] > old["tier"]
    a, b = score(new), score(old)
    if a is None:
        return False
    return b is None or a >= b * SPEEDUP_STEP


def score(best: dict) -> float | None:
    """The speedup a best is judged by: against both baselines, the smaller one."""
    xs = [x for x in (best.get("speedup_vs_eager"), best.get("speedup_vs_compile")) if x]
    return min(xs) if xs else None
