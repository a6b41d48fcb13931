"""The best verified kernel of an episode, and when a new one is better: a higher tier, or in the same tier at least
SPEEDUP_STEP faster against the weaker of its two baselines (timing noise must not make a "new best" of the same
kernel)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from cudagent.evaluator.verdict import Verdict

SPEEDUP_STEP = 1.01


@dataclass
class Best:
    """A verified kernel as the episode keeps it: the verdict's figures, and where the recorders put it."""

    turn: int
    tier: int
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    time_ms: dict | None = None
    commit: str | None = None  # the git recorder's commit of exactly the files judged
    tag: str | None = None

    @classmethod
    def of(cls, turn: int, verdict: Verdict) -> Best:
        return cls(turn, verdict.tier, verdict.speedup_vs_eager, verdict.speedup_vs_compile, dict(verdict.time_ms))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Best:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def is_better(new: Best, old: Best | None) -> bool:
    """
    >>> is_better(Best(2, 3, 1.5, 1.2), Best(1, 2, 1.9, 0.9))
    True
    >>> is_better(Best(2, 3, 1.5, 1.205), Best(1, 3, 1.5, 1.2))
    False
    """
    if old is None:
        return True
    if new.tier != old.tier:
        return new.tier > old.tier
    a, b = score(new), score(old)
    if a is None:
        return False
    return b is None or a >= b * SPEEDUP_STEP


def score(best: Best) -> float | None:
    """The speedup a best is judged by: against both baselines, the smaller one."""
    xs = [x for x in (best.speedup_vs_eager, best.speedup_vs_compile) if x]
    return min(xs) if xs else None
