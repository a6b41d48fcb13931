"""Whether regions put back make the model faster in the mode the user runs it, and which of them to keep.

    kept, dropped, alone = select(names, patched, check, prepare, clock, original, variant)   the rule, any clock
    proof = prove_regions(model, args, kwargs, program, chosen, mode="compile", device="cuda")

`select` is the rule prove.py applies to an exported package's regions (with the evaluator's clock, in the proof's
confined process). `prove_regions` applies it in this process to ops registered here: `chosen` maps a name to
(region, op) (putback.register with the region's kernel). Each region is tried alone first: the model's graph
with only that region replaced, timed in `mode` (eager, or torch.compile of the patched graph) against the original
in the same mode, in rounds interleaved with it; a region is kept only if it makes the model faster there by more
than `margin`. The kept regions are then put back together and the four variants timed in interleaved rounds
(original and patched, eager and compiled): what a user gets, in both modes, whatever the mode asked. Timings are
medians of `calls` calls after warm-up (CUDA events on the GPU), each variant built once; compiled variants are
compiled before they are timed.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

# How much faster the model must get for a region to be kept, or a compile mode other than the default to be the
# bar (alternatives.strongest_mode): a gain under 1% lies within the rounds' spread.
MARGIN = 0.01


def timed(fn, args: tuple, kwargs: dict | None = None, calls: int = 20, cuda: bool = False, warmup: int = 3) -> float:
    """Median milliseconds of fn(*args, **kwargs) over `calls` calls after `warmup` (CUDA events when `cuda`)."""
    import torch

    kwargs = kwargs or {}
    times = []
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args, **kwargs)
        for _ in range(calls):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(*args, **kwargs)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn(*args, **kwargs)
                times.append(1000 * (time.perf_counter() - t0))
    return statistics.median(times)


@dataclass
class RegionProof:
    mode: str
    ms: dict[str, float] = field(default_factory=dict)  # original_eager, patched_eager, original_compiled, ...
    kept: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # name -> why
    alone: dict[str, float] = field(default_factory=dict)  # name -> the model's time in `mode` with it alone put back

    def speedup(self, mode: str) -> float | None:
        a, b = self.ms.get(f"original_{mode}"), self.ms.get(f"patched_{mode}")
        return a / b if a and b else None

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "ms": {k: round(v, 4) for k, v in self.ms.items()},
            "kept": self.kept,
            "dropped": self.dropped,
            "alone": {k: round(v, 4) for k, v in self.alone.items()},
            "speedup": {m: self.speedup(m) for m in ("eager", "compiled")},
        }


def prove_regions(
    model,
    args,
    kwargs,
    program,
    chosen: dict,
    mode: str = "compile",
    device: str = "cpu",
    calls: int = 20,
    margin: float = MARGIN,
) -> RegionProof:
    import torch

    from cudagent.usermodel.putback import rewrite

    if mode not in ("eager", "compile"):
        raise ValueError(f"mode must be eager or compile, not {mode!r}")
    cuda = device.startswith("cuda")
    args, kwargs = tuple(args), dict(kwargs or {})
    proof = RegionProof(mode)
    variant = "compiled" if mode == "compile" else "eager"

    def run_as(module):
        return torch.compile(module) if mode == "compile" else module

    with torch.no_grad():
        expected = _tensors(model(*args, **kwargs))
    torch._dynamo.reset()
    original = run_as(model)
    proof.kept, proof.dropped, alone = select(
        list(chosen),
        lambda names: rewrite(program, {n: chosen[n] for n in names}),
        lambda module: _differs(module, args, kwargs, expected),
        run_as,
        lambda ready: timed(ready, args, kwargs, calls, cuda),
        original,
        variant,
        margin=margin,
    )
    proof.alone = {name: ms for name, (ms, _) in alone.items()}
    patched = rewrite(program, {n: chosen[n] for n in proof.kept}) if proof.kept else model
    compiled = original if mode == "compile" else torch.compile(model)
    variants = {
        "original_eager": model,
        "patched_eager": patched,
        "original_compiled": compiled,
        "patched_compiled": torch.compile(patched),
    }
    rounds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(3):  # interleaved, as in select
        for name, fn in variants.items():
            rounds[name].append(timed(fn, args, kwargs, calls, cuda))
    proof.ms = {name: statistics.median(v) for name, v in rounds.items()}
    return proof


def select(
    names,
    patched,
    check,
    prepare,
    clock,
    original,
    variant: str,
    rounds: int = 3,
    margin: float = MARGIN,
    keep_slower=False,
):
    """Which regions to keep: each put back alone (`patched([name])`), its outputs checked (`check(module)`: why
    they differ, or None), made ready to run in the mode asked (`prepare(module)`: itself, or compiled) and timed
    (`clock(ready)`: ms) in `rounds` rounds interleaved with the original (`original`, already prepared), so that
    whatever else the machine does in the meantime weighs on both alike; a region is kept where the model's median is
    below the original's median of the same rounds by more than `margin` (or at all, `keep_slower`, if only
    correct). Returns (kept, dropped: name -> why, alone: name -> (ms with it put back, ms without))."""
    kept, dropped, alone = [], {}, {}
    for name in names:
        module = patched([name])
        wrong = check(module)
        if wrong:
            dropped[name] = f"the model's outputs changed with it put back: {wrong}"
            continue
        ready = prepare(module)
        with_it, without = [], []
        for _ in range(rounds):
            without.append(clock(original))
            with_it.append(clock(ready))
        ms, base = statistics.median(with_it), statistics.median(without)
        alone[name] = (ms, base)
        if keep_slower or ms < base * (1 - margin):
            kept.append(name)
        else:
            dropped[name] = f"the model took {ms:.4f} ms {variant} with it put back, against {base:.4f} ms without" + (
                f" (a gain under the {margin:.0%} a region must bring)" if ms < base else ""
            )
    return kept, dropped, alone


def _tensors(out) -> list:
    import torch
    import torch.utils._pytree as pytree

    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _differs(module, args, kwargs, expected: list) -> str | None:
    """Why `module`'s outputs are not the original's (tolerances of the outputs' dtype), or None."""
    import torch

    with torch.no_grad():
        got = _tensors(module(*args, **kwargs))
    if len(got) != len(expected):
        return f"{len(got)} tensors returned, {len(expected)} expected"
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        tol = 1e-2 if b.dtype in (torch.bfloat16, torch.float16) else 1e-4
        if a.shape != b.shape or not torch.allclose(a.float(), b.float(), atol=tol, rtol=tol):
            return f"output {i} differs (largest difference {(a.float() - b.float()).abs().max().item():.3g})"
    return None
