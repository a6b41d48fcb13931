"""The reward's clock: the evaluator's own, around batches of calls, for the candidate and both baselines alike.

Anything read inside the candidate's process (perf_counter, CUDA events, a profiler) is the candidate's to forge: a
library can re-point the clock the timing loop reads. So the time that sets tiers and speedups is this process's
monotonic clock around one request to a child: "run this target `n` times". Each call gets contents never seen
before (its set's pristine draw under the next draw of transforms.py's stream, replayable here), and on a GPU the L2
flush before it and a synchronize after it, so a call is timed as in measure.py's samples (the larger of its device
and host time, the flush's device time hiding its launch latency). The batch ends in an early frame holding a
checksum of the last call's outputs (float64 sums, computed where the outputs are), which only the finished work can
give, and the clock stops there: the checksum is checked against the reference run here on the replayed inputs, and
then the outputs themselves are fetched and compared.

What a batch pays once, the round trip of its request and its early frame, is measured (the median of a few batches
of no calls) and taken off, and `n` is chosen, growing from a short first batch, so that it is under 1% of the batch.
What each call pays besides itself (its new contents; on a GPU the flush and the synchronize) is a "null" target's
batch (a call that does nothing) in the clean eager worker, subtracted from every target. Targets are timed in
interleaved rounds and the median of each is taken.

What is compared is the slower of this figure and the in-process median, target by target (profile.py): the
subtraction leaves the parent's figure noisy where a call costs less than changing its inputs, and the in-process
samples leave out what changing them costs. A candidate that forges its in-process clock is held to the parent's
figure.

The in-process figures (measure.py) stay beside it, with the per-kernel detail; a candidate whose own clock reads far
faster than this one (CLOCK_MISMATCH_FACTOR) is rejected on a GPU (TIMING_CLOCK_MISMATCH) and noted on a shared
CPU, where other programs' threads stall a batch as readily.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import statistics
from dataclasses import asdict, dataclass, field

from cudagent.evaluator.transforms import ParamStream

ROUNDS = 3
PINGS = 9
ROUND_TRIP_SHARE = 0.01  # the round trip is at most this share of a batch
BATCH_FLOOR_MS = 25.0  # a batch lasts at least this long, however short the round trip
MAX_CALLS = 200_000
CALIBRATION_CALLS = 3  # the first batch; calls_for grows it until a batch lasts long enough
FLOOR_MS = 1e-4  # a call faster than the null target's noise is reported as this
# A candidate's in-process median this much faster than the parent's figure (plus the absolute slack) read a clock
# that was not the real one: measure.py's samples and a batch's calls are timed the same way, so honest code agrees
# within load noise.
CLOCK_MISMATCH_FACTOR = 2.5
CLOCK_MISMATCH_SLACK_MS = 0.1

PROTOCOL = (
    "per target, the slower of two figures: the in-process samples' median, and the evaluator's own monotonic clock "
    "around batches of calls (each call on contents changed before it, on a GPU an L2 flush before it and a "
    "synchronize after it; the batch ending in a checksum of the last outputs, checked against the reference), the "
    "round trip under 1% of a batch and taken off, a null target's per-call cost subtracted, the median of "
    "interleaved rounds; for the candidate, eager and torch.compile alike"
)


class BatchRefused(Exception):
    """A batch did not come back right (an error, a missing or wrong checksum, outputs that differ)."""


@dataclass
class Clocked:
    """One target's batches: the calls per batch, each round's milliseconds per call (round trip taken off)."""

    n: int
    round_trip_ms: float
    rounds_ms: list[float] = field(default_factory=list)

    def per_call_ms(self) -> float:
        return statistics.median(self.rounds_ms)


def median_round_trip(request, msg: dict) -> float:
    """Milliseconds of a batch of no calls (the request's round trip and its early frame: what every batch pays once,
    whatever its length): the median of PINGS."""
    times = []
    for _ in range(PINGS):
        reply, seconds = request({**msg, "op": "batch", "n": 0, "seed": secrets.randbits(62)})
        _refuse_failed("a batch of no calls", reply)
        times.append(seconds * 1e3)
    return statistics.median(times)


def _refuse_failed(what: str, reply: dict) -> None:
    if not reply.get("ok", False):
        raise BatchRefused(f"{what} failed: {str(reply.get('error', 'no reply'))[:300]}")


def batch_ms_wanted(round_trip_ms: float) -> float:
    """How long a batch must last for the round trip to be under ROUND_TRIP_SHARE of it (BATCH_FLOOR_MS at least)."""
    return max(round_trip_ms / ROUND_TRIP_SHARE, BATCH_FLOOR_MS)


def calls_for(n: int, took_ms: float, round_trip_ms: float) -> int | None:
    """Calls per batch from a batch of `n` calls that took `took_ms` (round trip included): None if that batch was
    already long enough, else a larger count to try (at most tenfold, so one noisy short batch cannot ask for a
    batch of minutes)."""
    want = batch_ms_wanted(round_trip_ms)
    if took_ms >= want or n >= MAX_CALLS:
        return None
    per_call = max(took_ms - round_trip_ms, took_ms / 10) / n
    return min(MAX_CALLS, 10 * n, max(n + 1, math.ceil(1.2 * want / per_call)))


def run_calls(fn, sets: list, pristine: list, specs: list, seed: int, n: int, flush=None, sync=None, keep: int = 0):
    """The calls of one batch, wherever they run (the child's `batch` op; the evaluator's own reference when it
    measures what the work costs, audit/attribution.py): call c runs on set c % len(sets), its contents the pristine
    set under the seeded stream's next draw (replayable by the parent), after the flush (if any) and followed by the
    synchronize (if any). Returns (the last outputs, the last call's set, kept): `keep` outputs held by reference,
    chosen uniformly over the calls, each only after its call returned (measure.py's reservoir), {call: (set,
    outputs)}."""
    import torch

    stream = ParamStream(seed)
    k, out, kept = 0, None, {}
    with torch.no_grad():
        for c in range(n):
            k = c % len(sets)
            specs[k].apply(pristine[k], stream.next(len(sets[k])), out=sets[k])
            if flush is not None:
                flush.zero_()
            out = None  # the previous call's outputs go before the next call allocates its own
            out = fn(*sets[k])
            if sync is not None:
                sync()
            _reservoir(kept, keep, c, k, out)
    return out, k, kept


def _reservoir(kept: dict, size: int, c: int, k: int, out) -> None:
    """Hold call c's outputs with probability size / (c + 1), in place of a random held one (uniform over all)."""
    if size <= 0:
        return
    if len(kept) < size:
        kept[c] = (k, out)
    elif secrets.randbelow(c + 1) < size:
        del kept[secrets.choice(sorted(kept))]
        kept[c] = (k, out)


def checksums(outputs) -> list[float]:
    """The float64 sum of every tensor in `outputs`, in order (the child's side: computed where the outputs are)."""
    import torch

    from cudagent.trees import tensors

    return [float(torch.sum(t.detach(), dtype=torch.float64)) for t in tensors(outputs)]


def sums_disagree(reported, outputs, tolerance_of, slack: list[float] | None = None) -> str | None:
    """Why the checksums a batch reported are not the sums of `outputs` (the reference's on the replayed inputs, the
    answer it approximates, or the last call's own outputs fetched afterwards), or None. `tolerance_of(dtype)` is
    (atol, rtol) per element: a sum may be off by what its elements may be off by, summed, plus `slack[i]`."""
    import torch

    from cudagent.trees import tensors

    actual = list(tensors(outputs))
    if not isinstance(reported, list) or len(reported) != len(actual):
        count = len(reported) if isinstance(reported, list) else "no"
        return f"the batch reported {count} checksums for {len(actual)} outputs"
    for i, (r, t) in enumerate(zip(reported, actual)):
        x = t.detach().cpu().to(torch.float64)
        s = float(x.sum())
        if not isinstance(r, (int, float)) or isinstance(r, bool):
            return f"output {i}'s checksum is not a number"
        if not math.isfinite(s):  # NaN or infinity somewhere: compare.py judges those element by element
            if math.isfinite(float(r)):
                return f"output {i}'s checksum {float(r):.6g} is finite where the output's sum is not"
            continue
        atol, rtol = tolerance_of(t.dtype)
        allowed = x.numel() * atol + (rtol + 1e-6) * float(x.abs().sum()) + 1e-9 + (slack[i] if slack else 0.0)
        if not math.isfinite(float(r)) or abs(float(r) - s) > allowed:
            return f"output {i}'s checksum {float(r):.6g} is not its sum {s:.6g} (within {allowed:.3g})"
    return None


@dataclass
class ParentClock:
    """Times targets in interleaved rounds. `targets`: name -> (request, batch message); `request(msg)` returns
    (reply, seconds by this process's clock); `check(name, sent, reply)` runs after each batch, the clock stopped,
    and raises BatchRefused for a batch that did not do its work."""

    targets: dict
    null: tuple
    check: object = None
    watch: object = None  # attribution.Watch: the candidate's batches are sampled (audit/attribution.py)
    rounds: int = ROUNDS
    clocked: dict = field(default_factory=dict)

    def run(self) -> dict[str, float]:
        """Each target's milliseconds per call, the null target's subtracted."""
        everything = {**self.targets, "null": self.null}
        for name, (request, msg) in everything.items():
            self._batch(name, request, msg, CALIBRATION_CALLS)  # what a first batch pays once (buffers, caches)
            trip = median_round_trip(request, msg)
            n = CALIBRATION_CALLS
            while (more := calls_for(n, self._batch(name, request, msg, n), trip)) is not None:
                n = more
            self.clocked[name] = Clocked(n, trip)
        for _ in range(self.rounds):
            for name, (request, msg) in everything.items():
                self._round(name, request, msg, self.clocked[name])
        return {name: self.per_call(name) for name in self.targets}

    def per_call(self, name: str) -> float:
        return self._less_null(self.clocked[name])

    def _less_null(self, c: Clocked) -> float:
        """A target's time per call less the null target's (what each call pays besides itself)."""
        return max(c.per_call_ms() - self.clocked["null"].per_call_ms(), FLOOR_MS)

    def again(self, name: str, factor: int = 4) -> float:
        """A target timed once more in batches `factor` times as long, with new rounds: its time per call then."""
        request, msg = self.targets[name]
        c = self.clocked[name]
        longer = Clocked(min(MAX_CALLS, c.n * factor), c.round_trip_ms)
        for _ in range(self.rounds):
            self._round(name, request, msg, longer)
        self.clocked[f"{name}_again"] = longer
        return self._less_null(longer)

    def _round(self, name: str, request, msg: dict, c: Clocked) -> None:
        c.rounds_ms.append((self._batch(name, request, msg, c.n) - c.round_trip_ms) / c.n)

    def _batch(self, name: str, request, msg: dict, n: int) -> float:
        sent = {**msg, "op": "batch", "n": n, "seed": secrets.randbits(62)}
        if self.watch is None or name != "candidate":
            watched = contextlib.nullcontext()
        else:
            watched = self.watch.batch(n)
        with watched as stop:
            reply, seconds = request(sent, **({"at_early": stop} if stop else {}))
            _refuse_failed(f"the {name} batch", reply)
            if self.check is not None:
                self.check(name, sent, reply)
        return seconds * 1e3

    def to_dict(self) -> dict:
        null = self.clocked.get("null")
        return {
            "protocol": PROTOCOL,
            "null_ms_per_call": null.per_call_ms() if null and null.rounds_ms else None,
            "targets": {name: asdict(c) for name, c in self.clocked.items()},
        }


def early_request(child, what: str, timeout_s: float = 600.0, max_bytes: int = 1 << 20):
    """`request(msg)` for ParentClock over a ChildProcess: (reply, seconds from sending to the batch's early frame,
    by this process's clock; child.py's op_batch sends it when its calls are done, before the checks of the reply)."""

    def request(msg: dict, at_early=None):
        return child.early_request(msg, timeout_s=timeout_s, max_bytes=max_bytes, what=what, at_early=at_early)

    return request
