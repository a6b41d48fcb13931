"""The timing loop. Runs inside a child (the candidate's, or a clean baseline worker).

Per sample: flush the L2 cache (write a buffer twice its size), synchronize the device, record CUDA events on the
current stream around one call, synchronize again. Input sets rotate so no sample finds its inputs in cache. Wall
time is recorded beside event time for the parent's cross-check. On the CPU the structure is the same with a
host cache flush and perf_counter.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

CPU_FLUSH_BYTES = 32 * 1024 * 1024
# Input sets rotated through a timing loop, so no sample finds its inputs in cache from the sample before.
INPUT_SETS = 3


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
    recheck: tuple[int, ...] = ()  # sample indices whose outputs are kept for the parent to check

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        d = dict(d)
        d["recheck"] = tuple(d.get("recheck", ()))
        return cls(**d)


def flush_buffer(device: torch.device, nbytes: int) -> torch.Tensor:
    if not nbytes:
        if device.type == "cuda":
            l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 1024 * 1024)
            nbytes = max(2 * l2, 64 * 1024 * 1024)
        else:
            nbytes = CPU_FLUSH_BYTES
    return torch.empty(nbytes // 4, dtype=torch.float32, device=device)


def measure(call, n_sets: int, device: torch.device, plan: Plan, before_sample=None) -> dict:
    """Time `call(k)` (k = input set index) per the plan.

    Returns per-sample event times, wall times of the call alone, wall times of the whole iteration (flush included)
    and the outputs kept for re-checking. `before_sample(i)`, if given, runs before sample i's flush (outside the
    timed region): the parent uses it to change an input set's contents in place at secret points.
    """
    cuda = device.type == "cuda"
    flush = flush_buffer(device, plan.flush_bytes)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with torch.no_grad():
        for k in range(max(plan.warmup_calls, n_sets)):
            call(k % n_sets)
        sync()
        ms, wall_ms, loop_ms, kept = [], [], [], {}
        recheck = set(plan.recheck)
        if cuda:
            start_ev = torch.cuda.Event(enable_timing=True)
            end_ev = torch.cuda.Event(enable_timing=True)
        began = time.perf_counter()
        i = 0
        while True:
            k = i % n_sets
            if before_sample is not None:
                before_sample(i)
            t_loop = time.perf_counter()
            flush.zero_()
            sync()
            t0 = time.perf_counter()
            if cuda:
                start_ev.record()
                out = call(k)
                end_ev.record()
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                ms.append(start_ev.elapsed_time(end_ev))
            else:
                out = call(k)
                t1 = time.perf_counter()
                ms.append((t1 - t0) * 1e3)
            wall_ms.append((t1 - t0) * 1e3)
            loop_ms.append((t1 - t_loop) * 1e3)
            if i in recheck:
                kept[i] = (k, _clone(out))
            del out
            i += 1
            elapsed = time.perf_counter() - began
            if (i >= plan.min_samples and elapsed >= plan.min_seconds) or i >= plan.max_samples:
                break
            if elapsed >= plan.max_seconds and i >= 10:
                break
    return {"ms": ms, "wall_ms": wall_ms, "loop_ms": loop_ms, "kept": kept}


def _clone(out):
    if isinstance(out, torch.Tensor):
        return out.detach().clone() if type(out) is torch.Tensor else out
    if isinstance(out, (list, tuple)):
        return type(out)(_clone(o) for o in out)
    return out
