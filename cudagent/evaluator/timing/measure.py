"""The timing loop. Runs inside a child (the candidate's, or a clean baseline worker).

Per CUDA sample, with the device idle: queue a GPU-side lead (a spin kernel long enough to cover the call's host
work, calibrated from the warm-up calls), the L2 flush (a buffer twice the L2 written) and the start event, then
make the call, record the end event and synchronize. While the lead runs the host enqueues the whole call, so the
events see the call's device time without the host's launch latency, which varies from process to process by
more than a kernel's own run-to-run noise. The host's enqueue time is kept beside it: a sample is the larger of
the two, so a call whose Python or launch path is slower than its kernels is charged for that path, as a loop of
calls would be. A sample whose lead ran out before the call was enqueued (a call that synchronizes, or a host
hiccup) is the event time alone, which then includes the host's gaps. Wall time, from the moment the device
reached the start event to the moment every stream was idle, is recorded for the parent's cross-check.

Input sets rotate so no sample finds its inputs in cache. On the CPU: a host cache flush and perf_counter.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import torch

CPU_FLUSH_BYTES = 32 * 1024 * 1024
# The GPU-side lead before each sample: this many times the call's median host time in warm-up, plus a floor.
LEAD_HOST_FACTOR = 3.0
LEAD_FLOOR_MS = 0.03
LEAD_CAP_MS = 50.0
# Input sets rotated through a timing loop, so no sample finds its inputs in cache from the sample before.
INPUT_SETS = 3
# One set only where a set is this many times the flush buffer: the call's own traffic then leaves next to none of
# its inputs in cache, and two more sets would cost the task gigabytes of device memory (KernelBench's ReLU draws
# 6.4 GB per set; the candidate's process keeps each set twice). The flush before every sample stays.
ONE_SET_FLUSH_MULTIPLE = 8


@dataclass
class Plan:
    min_samples: int = 100
    min_seconds: float = 0.5
    max_samples: int = 5000
    max_seconds: float = 20.0
    # Warm-up is counted in calls, not seconds: the candidate's process could lie about seconds, and the parent's
    # clock check (profile.py) needs to know how long warm-up may take.
    warmup_calls: int = 10
    flush_bytes: int = 0  # 0: twice the device's L2 (CUDA) or CPU_FLUSH_BYTES
    # Outputs of this many samples, chosen uniformly over the whole loop after each sample ran (reservoir
    # sampling from the operating system's randomness), are kept for the parent to check: which samples are
    # checked is decided only once their output exists, so no call can know it will be checked.
    keep: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def default_flush_bytes(device: torch.device) -> int:
    """Twice the device's L2 (at least 64 MiB) on CUDA; CPU_FLUSH_BYTES on the CPU."""
    if device.type == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 1024 * 1024)
        return max(2 * l2, 64 * 1024 * 1024)
    return CPU_FLUSH_BYTES


def flush_buffer(device: torch.device, nbytes: int) -> torch.Tensor:
    return torch.empty((nbytes or default_flush_bytes(device)) // 4, dtype=torch.float32, device=device)


def sets_for(set_bytes: int, device: torch.device | str) -> int:
    """How many input sets a timing rotates: INPUT_SETS, or one when a set takes ONE_SET_FLUSH_MULTIPLE times the
    flush buffer or more (the candidate and the baselines of a task get the same number: it depends only on the
    task's input sizes and the device)."""
    return 1 if set_bytes >= ONE_SET_FLUSH_MULTIPLE * default_flush_bytes(torch.device(device)) else INPUT_SETS


def draw_input_sets(draw, device: torch.device | str) -> list[list]:
    """The input sets of a timing (`sets_for`): `draw(i)` gives set i."""
    first = draw(0)
    nbytes = sum(x.numel() * x.element_size() for x in first if isinstance(x, torch.Tensor))
    return [first] + [draw(i) for i in range(1, sets_for(nbytes, device))]


def measure(call, n_sets: int, device: torch.device, plan: Plan, before_call=None) -> dict:
    """Time `call(k)` (k = input set index) per the plan.

    Returns per-sample times (`ms`), the device and host parts of each (`device_ms`, `host_ms`), wall times for the
    cross-check (`wall_ms`), wall times of whole iterations (`loop_ms`: lead, flush and input change included), how
    many samples the lead did not cover, the number of warm-up calls, and the kept outputs as
    {call index: (input set, outputs)}. `before_call(c, k)`, if given, runs before call c (warm-up calls counted)
    on input set k, outside the timed region: the child uses it to give the set contents never seen before.
    """
    cuda = device.type == "cuda"
    flush = flush_buffer(device, plan.flush_bytes)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with torch.no_grad():
        warm_host = []
        warmup = max(plan.warmup_calls, n_sets)
        for c in range(warmup):
            if before_call is not None:
                before_call(c, c % n_sets)
            t = time.perf_counter()
            call(c % n_sets)
            warm_host.append((time.perf_counter() - t) * 1e3)
            sync()
        sample = _CudaSample(flush, _lead_cycles(warm_host)) if cuda else _CpuSample(flush)
        result = {"ms": [], "device_ms": [], "host_ms": [], "wall_ms": [], "loop_ms": [], "uncovered": 0}
        result["warmup_calls"] = warmup
        kept: dict[int, tuple] = {}
        began = time.perf_counter()
        i = 0
        while True:
            k = (warmup + i) % n_sets  # the set of call c is c % n_sets, warm-up calls counted
            t_loop = time.perf_counter()
            if before_call is not None:
                before_call(warmup + i, k)
            out, event, host, wall, covered = sample(call, k)
            result["ms"].append(max(event, host) if covered else event)
            result["device_ms"].append(event)
            result["host_ms"].append(host)
            result["wall_ms"].append(wall)
            result["uncovered"] += not covered
            _reservoir(kept, plan.keep, i, warmup + i, k, out)
            result["loop_ms"].append((time.perf_counter() - t_loop) * 1e3)
            del out
            i += 1
            elapsed = time.perf_counter() - began
            if (i >= plan.min_samples and elapsed >= plan.min_seconds) or i >= plan.max_samples:
                break
            if elapsed >= plan.max_seconds and i >= 10:
                break
    result["kept"] = kept
    return result


def _reservoir(kept: dict, size: int, i: int, call_index: int, k: int, out) -> None:
    """Keep sample i's output with probability size / (i + 1), in place of a random kept one (uniform over all)."""
    if size <= 0:
        return
    if len(kept) < size:
        kept[call_index] = (k, _clone(out))
    elif secrets.randbelow(i + 1) < size:
        del kept[secrets.choice(sorted(kept))]
        kept[call_index] = (k, _clone(out))


class _CudaSample:
    def __init__(self, flush: torch.Tensor, lead_cycles: int):
        self.flush, self.lead_cycles = flush, lead_cycles
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def __call__(self, call, k: int):
        """(output, event ms, host enqueue ms, wall ms, whether the lead covered the host's work)."""
        torch.cuda.synchronize()
        torch.cuda._sleep(self.lead_cycles)
        self.flush.zero_()
        self.start.record()
        t0 = time.perf_counter()
        out = call(k)
        self.end.record()
        t1 = time.perf_counter()
        covered = not self.start.query()
        reached = t0
        if covered:  # wait for the device to reach the call, so the wall time starts where the events do
            while not self.start.query():
                pass
            reached = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        return out, self.start.elapsed_time(self.end), (t1 - t0) * 1e3, (t2 - reached) * 1e3, covered


class _CpuSample:
    def __init__(self, flush: torch.Tensor):
        self.flush = flush

    def __call__(self, call, k: int):
        self.flush.zero_()
        t0 = time.perf_counter()
        out = call(k)
        ms = (time.perf_counter() - t0) * 1e3
        return out, ms, ms, ms, True


_cycles_per_ms: float | None = None


def _lead_cycles(warm_host_ms: list[float]) -> int:
    """GPU clock cycles of spin that outlast the call's host work: a multiple of its median warm-up host time."""
    global _cycles_per_ms
    if _cycles_per_ms is None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(2):  # the first includes loading the spin kernel
            torch.cuda.synchronize()
            start.record()
            torch.cuda._sleep(1_000_000)
            end.record()
            torch.cuda.synchronize()
        _cycles_per_ms = 1_000_000 / max(start.elapsed_time(end), 1e-3)
    tail = sorted(warm_host_ms[len(warm_host_ms) // 2 :])  # later warm-up calls: caches and compilers settled
    lead_ms = min(LEAD_FLOOR_MS + LEAD_HOST_FACTOR * tail[len(tail) // 2], LEAD_CAP_MS)
    return int(lead_ms * _cycles_per_ms)


def _clone(out):
    if isinstance(out, torch.Tensor):
        return out.detach().clone() if type(out) is torch.Tensor else out
    if isinstance(out, (list, tuple)):
        return type(out)(_clone(o) for o in out)
    return out
