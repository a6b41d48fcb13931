"""Put the kernels back and prove it: the patched model against the original, on fresh inputs and on one clock.

    python -m cudagent.usermodel.prove REQUEST.json     (prints one JSON object)

Runs in a process of its own, confined like a candidate's (cudagent/evaluator/jail/confine.py: the model's folders
and the package readable, the package's build folders and its scratch writable, no network), since the package's kernels
are a model's code. It builds the user's model as `optimize` did (the same seed), patches a copy with the package
(package.py), and:

- **verifies** the patched model against the original on fresh inputs (seeds the profile never used), with the
  evaluator's tolerances (cudagent/evaluator/compare.py). A spot whose kernel breaks the model is found by
  applying each spot alone, reported, and left out; the others are verified and timed without it.
- **times** the original and the patched model, eager and under torch.compile, with the evaluator's timing loop
  (cudagent/evaluator/timing/measure.py: the same clock as every verdict), in interleaved rounds.

A package of region kernels (region_package.py: `patch(model, *inputs)` returns the model's graph calling them as
custom ops) is proved the same way, and each kind is also timed alone in the mode the user runs the model in
(`mode`: eager, or a torch.compile mode; `auto`, the mode the original runs fastest in): it stays only if the
model is faster with it there (region_proof.select; `keep_slower` keeps every correct one). The patched graph's
graph breaks under torch.compile are counted. Beside the four variants, the timing holds what else a user could
pick (alternatives.py): the original in every torch.compile mode, and Liger Kernel's patch where it applies.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path

SEEDS = (101, 202, 303)  # fresh inputs: hotspots and the tasks drew seed 0


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    _confine(request)
    print(json.dumps(prove(request)))
    return 0


def _confine(request: dict) -> None:
    import cudagent.evaluator.jail.confine as confine
    import cudagent.evaluator.jail.privileges as isolation

    isolation.drop_privileges()
    plan = confine.Plan(request.get("confine", "best-effort"), read=request["read"], write=[request["package"]])
    try:
        request["confinement"] = confine.enter(plan)
    except confine.Unconfined as exc:
        print(json.dumps({"error": f"the kernels cannot run confined here ({exc}); use --confine best-effort"}))
        sys.exit(0)


def prove(request: dict) -> dict:
    import importlib

    from cudagent.usermodel.modelrun import ModelRequest

    device = request["device"]
    user = ModelRequest(**request["model"]).load()
    package = Path(request["package"])
    sys.path.insert(0, str(package.parent))
    kernels = importlib.import_module(package.name)
    if hasattr(kernels, "KINDS"):
        return prove_regions(request, user, kernels, device)
    names = [s["name"] for s in kernels.SPOTS]
    dtype = request.get("dtype")
    original, _, _ = user.make(seed=0, device=device, dtype=dtype)
    wide = _float32(original, dtype)
    result: dict = {"confinement": request.get("confinement"), "device": device, "spots": {}}
    working = []
    for name in names:  # each spot alone first: a kernel that breaks the model is named, and the others go on
        alone = _patched(original, kernels, [name])
        check = _verify(original, alone, user, device, dtype, wide)
        result["spots"][name] = check
        if check["correct"]:
            working.append(name)
    result["applied"] = working
    if not working:
        result["correct"] = False
        return result
    patched = _patched(original, kernels, working)
    result["verification"] = _verify(original, patched, user, device, dtype, wide)
    result["correct"] = result["verification"]["correct"]
    if not result["correct"] or not request.get("timing", True):
        return result
    args, kwargs = user.make_inputs(SEEDS[0], device, dtype)
    ready: dict = {}
    mode = _resolve_mode(request, original, args, kwargs, device, result, ready)
    result["timing"] = _time(original, patched, args, kwargs, device, request.get("rounds", 3), mode, ready)
    return result


def prove_regions(request: dict, user, kernels, device: str) -> dict:
    import torch

    from cudagent.usermodel.alternatives import prepared
    from cudagent.usermodel.region_proof import select

    dtype = request.get("dtype")
    original, args, kwargs = user.make(seed=SEEDS[0], device=device, dtype=dtype)
    wide = _float32(original, dtype)
    result: dict = {"confinement": request.get("confinement"), "device": device, "spots": {}}
    torch._dynamo.reset()
    ready: dict = {}  # mode -> the original as prepared for it (compiled once)
    mode = _resolve_mode(request, original, args, kwargs, device, result, ready)
    variant = "eager" if mode == "eager" else "compiled"

    bound: dict = {}  # kind -> how its kernel is called (putback.bind)

    def patched(names):
        module = kernels.patch(original, *args, kinds=names, **kwargs)
        bound.update(getattr(module, "bound", {}))
        return module

    def check(module):
        outcome = _verify(original, module, user, device, dtype, wide)
        return None if outcome["correct"] else outcome["why"]

    def clock(ready):
        return _clock(ready, args, kwargs, device)

    names = [k["name"] for k in kernels.KINDS]
    kept, dropped, alone = select(
        names,
        patched,
        check,
        lambda module: prepared(module, mode, args, kwargs),
        clock,
        ready[mode] if mode in ready else prepared(original, mode, args, kwargs),
        variant,
        keep_slower=request.get("keep_slower", False),
    )
    for name in names:
        correct = name in alone  # timed alone only once its outputs were right
        result["spots"][name] = {"correct": correct, "kept": name in kept, "bound": bound.get(name)}
        if name in dropped:
            result["spots"][name]["why"] = dropped[name]
        if name in alone:
            result["spots"][name]["model_ms_alone"], result["spots"][name]["model_ms_without"] = alone[name]
    result["applied"] = kept
    if not kept:
        result["correct"] = False
        result["why"] = "no kind of region both kept the model's outputs and made it faster " + (
            "eager" if mode == "eager" else f"compiled ({mode} mode)"
        )
        return result
    final = patched(kept)
    result["verification"] = _verify(original, final, user, device, dtype, wide)
    result["correct"] = result["verification"]["correct"]
    if not result["correct"] or not request.get("timing", True):
        return result
    result["timing"] = _time(original, final, args, kwargs, device, request.get("rounds", 3), mode, ready)
    torch._dynamo.reset()  # last: explain from nothing cached, and the originals compiled once served every timing
    with torch.no_grad():
        explained = torch._dynamo.explain(final)(*args, **kwargs)
    torch._dynamo.reset()
    result["graph_breaks"], result["graphs"] = explained.graph_break_count, explained.graph_count
    return result


def _resolve_mode(request: dict, original, args, kwargs, device: str, result: dict, ready: dict) -> str:
    """The mode the kernels are held to: the one asked, or (auto) the torch.compile mode the original model runs
    fastest in here (alternatives.strongest_mode: the default unless another is faster by more than the margin),
    each mode's time kept in the result (and each prepared original in `ready`)."""
    from cudagent.usermodel.alternatives import compile_modes, normalize, prepared, strongest_mode

    asked = normalize(request.get("mode", "auto"))
    result["mode_asked"] = asked
    if asked != "auto":
        result["mode"] = asked
        return asked
    modes = compile_modes(device)
    if len(modes) > 1:
        for m in modes:
            ready[m] = prepared(original, m, args, kwargs)
        # interleaved rounds, as the final timing's: one measurement each chose a mode the rounds then found slowest
        rounds = _interleaved({m: ready[m] for m in modes}, args, kwargs, device, 5)
        result["modes_ms"] = {m: statistics.median(v) for m, v in rounds.items()}
        result["mode"] = strongest_mode(result["modes_ms"])
    else:
        result["mode"] = modes[0]
    return result["mode"]


def _interleaved(targets: dict, args, kwargs, device: str, rounds: int) -> dict[str, list[float]]:
    """Each target's time a call (_clock) in `rounds` rounds, the targets taking turns in every round, so that
    whatever else the machine does weighs on all of them alike."""
    per_round: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, fn in targets.items():
            per_round[name].append(_clock(fn, args, kwargs, device))
    return per_round


def _clock(fn, args, kwargs, device: str) -> float:
    import torch

    from cudagent.evaluator.timing.measure import measure

    with torch.no_grad():
        return statistics.median(measure(lambda k: fn(*args, **kwargs), 1, torch.device(device), _plan())["ms"])


def _plan():
    """The evaluator's timing loop as the proof runs it: at least 20 samples and 0.2 s, at most 5 s a target."""
    from cudagent.evaluator.timing.measure import Plan

    return Plan(min_samples=20, min_seconds=0.2, max_seconds=5.0, warmup_calls=3)


def _patched(original, kernels, names):
    import copy

    model = copy.deepcopy(original)
    kernels.patch(model, spots=names)
    return model


def _verify(original, patched, user, device: str, dtype: str | None = None, wide=None) -> dict:
    """Whether `patched` computes what `original` does on fresh inputs: within the evaluator's tolerances of the
    outputs' dtype; or, for a model run in bfloat16 or float16 (`wide`: the same model in float32), no less
    accurately than the original against the float32 run (a kernel that keeps fp32 where the model rounds to bf16
    between operators differs from it by more than bf16's tolerance after a few layers, and is closer to the truth,
    as torch.compile's own fused kernels are)."""
    import torch

    from cudagent.evaluator.compare import Tolerance, compare

    worst, against = 0.0, None
    for seed in SEEDS:
        args, kwargs = user.make_inputs(seed, device, dtype)
        try:
            with torch.no_grad():
                expected = original(*args, **kwargs)
                got = patched(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001  (a kernel's failure is the finding)
            return {"correct": False, "why": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
        outcome = compare(comparable(expected), comparable(got), Tolerance())
        worst = max(worst, outcome.max_abs_error)
        if outcome.ok:
            continue
        if wide is None:
            return {"correct": False, "why": outcome.violations[0].message, "max_abs_error": outcome.max_abs_error}
        wide_args, wide_kwargs = user.make_inputs(seed, device)
        with torch.no_grad():
            truth = wide(*wide_args, **wide_kwargs)
        mine, theirs = _error(got, truth), _error(expected, truth)
        against = {"patched": mine, "original": theirs}
        if mine["rel_l2"] > 1.5 * theirs["rel_l2"] + 1e-4 or mine["max_abs"] > 2 * theirs["max_abs"] + 1e-3:
            return {
                "correct": False,
                "why": f"{outcome.violations[0].message}; and against a float32 run it is less accurate than the "
                f"original (relative L2 error {mine['rel_l2']:.3g} against {theirs['rel_l2']:.3g}, largest "
                f"{mine['max_abs']:.3g} against {theirs['max_abs']:.3g})",
                "max_abs_error": outcome.max_abs_error,
            }
    verdict = {"correct": True, "max_abs_error": worst, "inputs": len(SEEDS)}
    if against is not None:
        verdict["against_float32"] = against
    return verdict


def _error(output, truth) -> dict:
    """The largest absolute and the relative L2 error of an output's floating tensors against `truth`'s."""
    import torch
    import torch.utils._pytree as pytree

    got = [t for t in pytree.tree_leaves(comparable(output)) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    want = [t for t in pytree.tree_leaves(comparable(truth)) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    diff_sq = ref_sq = largest = 0.0
    for a, b in zip(got, want, strict=False):
        d = a.double() - b.double()
        diff_sq += float((d * d).sum())
        ref_sq += float((b.double() * b.double()).sum())
        largest = max(largest, float(d.abs().max())) if d.numel() else largest
    return {"rel_l2": (diff_sq / ref_sq) ** 0.5 if ref_sq else 0.0, "max_abs": largest}


def _float32(model, dtype: str | None):
    """The model in float32, for a model run in a narrower dtype (None otherwise)."""
    import copy

    if dtype not in ("bfloat16", "float16"):
        return None
    return copy.deepcopy(model).float()


def comparable(output, _seen: frozenset = frozenset()):
    """A model's output as tensors and plain values in lists, tuples and dicts, for compare(): a dict-like output
    (transformers' ModelOutput) or an object (a key/value cache) becomes a dict of its items or public attributes,
    its type named, so that every tensor in it is compared."""
    import torch

    if isinstance(output, (torch.Tensor, bool, int, float, str)) or output is None:
        return output
    if id(output) in _seen:
        return "<seen>"
    seen = _seen | {id(output)}
    if isinstance(output, (list, tuple)):
        plain = [comparable(x, seen) for x in output]
        return plain if isinstance(output, list) else tuple(plain)
    if isinstance(output, Mapping):
        return {"<type>": type(output).__qualname__, **{str(k): comparable(v, seen) for k, v in output.items()}}
    if isinstance(output, type) or callable(output):
        return f"<{getattr(output, '__qualname__', type(output).__qualname__)}>"
    if not hasattr(output, "__dict__"):
        return output  # a dtype, a device, an enum: compared by equality
    items = {k: comparable(v, seen) for k, v in vars(output).items() if not k.startswith("_")}
    return {"<type>": type(output).__qualname__, **items}


def _time(
    original, patched, args, kwargs, device: str, rounds: int, mode: str = "default", ready: dict | None = None
) -> dict:
    """The original and the patched model, eager and compiled (the patched one in `mode`), beside what else the user
    could run (the original compiled in each torch.compile mode, Liger Kernel's patch where it applies), each timed
    by the evaluator's loop in `rounds` interleaved rounds. A target that cannot be built is named in `errors`.
    `ready`: the original already prepared in some modes (by _resolve_mode), used as it is."""

    from cudagent.usermodel.alternatives import compile_modes, key, liger, prepared

    ready = ready or {}
    compiled_in = "default" if mode == "eager" else mode
    makers = {
        key(m): (lambda m=m: ready[m] if m in ready else prepared(original, m, args, kwargs))
        for m in compile_modes(device)
    }
    makers["patched_compile"] = lambda: prepared(patched, compiled_in, args, kwargs)
    targets = {"eager": original, "patched": patched}
    errors, skipped = {}, {}
    variant, why = liger(original)
    if variant is None:
        skipped["liger"] = why
    else:
        targets["liger"] = variant
        makers["liger_compile"] = lambda: variant.compiled(args, kwargs)
    for name, make in makers.items():
        try:
            targets[name] = make()
        except Exception as exc:  # noqa: BLE001  (recorded: that target is not timed)
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    per_round = _interleaved(targets, args, kwargs, device, rounds)
    ms = {name: statistics.median(v) for name, v in per_round.items()}
    spread = {name: [min(v), max(v)] for name, v in per_round.items()}
    out = {"ms": ms, "round_spread_ms": spread, "rounds": rounds, "errors": errors, "not_timed": skipped}
    out["patched_compile_mode"] = compiled_in
    if "eager" in ms and "patched" in ms:
        out["speedup_vs_eager"] = ms["eager"] / ms["patched"]
    best_patched = min(v for k, v in ms.items() if k.startswith("patched"))
    if "compile" in ms:
        out["speedup_vs_compile"] = ms["compile"] / best_patched
    others = {k: v for k, v in ms.items() if not k.startswith("patched")}
    if others:
        out["best_alternative"] = min(others, key=others.get)
        out["speedup_vs_best_alternative"] = others[out["best_alternative"]] / best_patched
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
