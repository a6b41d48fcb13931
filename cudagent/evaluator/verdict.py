"""The evaluator's answer: a Verdict, with its trials, violations, timings and reward tier."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from cudagent.evaluator.codes import CODES
from cudagent.evaluator.report import render

TIER_MARGIN = 0.05


@dataclass(frozen=True)
class Violation:
    code: str
    message: str

    def __post_init__(self):
        if self.code not in CODES:
            raise ValueError(f"unknown violation code {self.code}")

    def to_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


@dataclass
class Trial:
    name: str
    passed: bool
    max_abs_error: float | None = None
    # max over elements of |got - expected| / (atol + rtol * |expected|): above 1 fails.
    worst_tolerance_ratio: float | None = None
    message: str | None = None
    seconds: float | None = None  # the whole trial: reference, transfer, the candidate's call, the comparison


@dataclass
class TimeStats:
    median: float
    p10: float
    p90: float
    mean: float
    samples: int

    @classmethod
    def of(cls, values: list[float]) -> TimeStats:
        xs = sorted(values)
        n = len(xs)

        def q(p: float) -> float:
            return xs[min(n - 1, max(0, round(p * (n - 1))))]

        return cls(median=_median(xs), p10=q(0.1), p90=q(0.9), mean=sum(xs) / n, samples=n)


def _median(xs: list[float]) -> float:
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def reward_tier(
    correct: bool, candidate: float | None, eager: float | None, compiled: float | None, margin: float = TIER_MARGIN
) -> int:
    """The CUDA Agent reward: -1 incorrect; 1 correct; 2 faster than eager; 3 at least `margin` faster than both.

    "x faster" means a speedup (baseline time over candidate time) of at least 1 + x.

    >>> reward_tier(False, 1.0, 2.0, 2.0)
    -1
    >>> reward_tier(True, None, 2.0, 2.0)
    1
    >>> reward_tier(True, 1.0, 0.9, 0.8)
    1
    >>> reward_tier(True, 1.0, 1.02, 0.9)
    2
    >>> reward_tier(True, 1.0, 1.2, 1.04)
    2
    >>> reward_tier(True, 1.0, 1.2, 1.06)
    3
    """
    if not correct:
        return -1
    if candidate is None or eager is None or candidate <= 0:
        return 1
    vs_eager = eager / candidate
    vs_compile = compiled / candidate if compiled is not None else None
    if vs_compile is not None and vs_eager >= 1 + margin and vs_compile >= 1 + margin:
        return 3
    if vs_eager > 1:
        return 2
    return 1


@dataclass
class Verdict:
    correct: bool = False
    tier: int = -1
    violations: list[Violation] = field(default_factory=list)
    error: str | None = None
    max_abs_error: float | None = None
    time_ms: dict = field(default_factory=lambda: {"eager": None, "compile": None, "candidate": None})
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    trials: list[Trial] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # facts worth reporting that are not violations
    null_candidates: list[str] = field(default_factory=list)  # those that pass the task: a degenerate task
    task: dict = field(default_factory=dict)
    device: dict = field(default_factory=dict)
    candidate_format: str | None = None
    build: dict | None = None
    seconds: dict = field(default_factory=dict)  # time spent per phase
    timeline: dict = field(default_factory=dict)  # phase -> [start, end], s from the evaluation's start (overlapping)
    timing: dict | None = None  # the profiler's detail (per-target statistics, roofline, kernel breakdown)
    confinement: dict | None = None  # what held in the candidate's process (confine.status()); None: none ran
    cpu_time: dict | None = None  # CPU only: where forward's CPU time went, by kind of code (audit/attribution.py)

    def reject(self, code: str, message: str) -> None:
        """Record a violation. The same finding in several trials becomes one violation naming those trials."""
        self.correct = False
        trials, body = _split_trials(message)
        for i, v in enumerate(self.violations):
            seen, seen_body = _split_trials(v.message)
            if v.code == code and seen_body == body and trials and seen:
                merged = seen + [t for t in trials if t not in seen]
                self.violations[i] = Violation(code, f"[{', '.join(merged)}] {body}")
                return
        self.violations.append(Violation(code, message))
        if self.error is None:
            self.error = message

    @property
    def codes(self) -> list[str]:
        return [v.code for v in self.violations]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["violations"] = [v.to_dict() for v in self.violations]
        return d

    def set_times(
        self, eager: float | None, compiled: float | None, candidate: float | None, margin: float = TIER_MARGIN
    ) -> None:
        self.time_ms = {"eager": eager, "compile": compiled, "candidate": candidate}
        if candidate and candidate > 0:
            self.speedup_vs_eager = eager / candidate if eager else None
            self.speedup_vs_compile = compiled / candidate if compiled else None
        self.tier = reward_tier(self.correct, candidate, eager, compiled, margin)

    def summary(self, detail: bool = False) -> str:
        """The verdict as text (report.py): a few lines, or with `detail` the full hardware feedback."""
        return render(self, detail)

    @classmethod
    def from_dict(cls, d: dict) -> Verdict:
        """The inverse of to_dict (a verdict that crossed a process or a network as JSON)."""
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["violations"] = [Violation(x["code"], x["message"]) for x in d.get("violations", [])]
        known["trials"] = [Trial(**t) for t in d.get("trials", [])]
        return cls(**known)


def _split_trials(message: str) -> tuple[list[str], str]:
    """'[stock-1, stress] text' -> (['stock-1', 'stress'], 'text'); no prefix -> ([], message)."""
    if message.startswith("[") and "] " in message:
        head, body = message[1:].split("] ", 1)
        return [t.strip() for t in head.split(",")], body
    return [], message
