"""What a user could run instead of cudagent's kernels, made ready to be timed beside them in the proof.

    mode = normalize(asked)                           eager, default, reduce-overhead, max-autotune or auto
    ready = prepared(module, mode, args, kwargs)      the module as the mode runs it, compiled and warmed up
    keys = compile_modes(device)                      the torch.compile modes that apply on this device
    variant, why = liger(model)                       a copy with Liger Kernel's patch, or why there is none

torch.compile has three modes a user picks from: `default`; `reduce-overhead` (CUDA graphs: the host's launches
replayed, which is what a small-batch model spends its time on); `max-autotune` (GEMM and kernel templates tried
at compile time, with CUDA graphs). Which is fastest depends on the model, so `auto` times the original model in
each and holds the kernels to the fastest: the bar is the strongest thing the user would pick, not the weakest. On
the CPU only `default` applies (CUDA graphs need a GPU; max-autotune's CPU templates take minutes to tune).

Liger Kernel (Triton kernels for RMSNorm, rotary, SwiGLU in transformers' Llama-family models) patches the model
class's module: a function of the module (`apply_rotary_pos_emb`) and its classes. Patching the original would change
what it computes too, so the patch is applied to a copy and the module's changed names are swapped in only while
that copy runs (`Swapped`), and swapped back after.
"""

from __future__ import annotations

import copy
import sys

from cudagent.usermodel.region_proof import MARGIN

MODES = ("eager", "default", "reduce-overhead", "max-autotune")
ASKED = (*MODES, "auto", "compile")  # compile: torch.compile's default mode, as earlier versions named it


def normalize(mode: str) -> str:
    """The mode asked, as the proof names it ("compile" is the default mode)."""
    if mode not in ASKED:
        raise ValueError(f"mode must be one of {', '.join(ASKED)}, not {mode!r}")
    return "default" if mode == "compile" else mode


def compile_modes(device: str) -> tuple[str, ...]:
    return ("default", "reduce-overhead", "max-autotune") if device.startswith("cuda") else ("default",)


def strongest_mode(modes_ms: dict[str, float], margin: float = MARGIN) -> str:
    """The mode to hold the kernels to, from each mode's median: the default unless another mode beats it by more
    than `margin` (then the fastest). A mode picked on a gain within the noise made the patched model lose to the
    default mode in the final rounds (an H100 Llama run: reduce-overhead 0.2% ahead in the picking rounds, 3% behind
    in the final ones)."""
    fastest = min(modes_ms, key=modes_ms.get)
    if "default" in modes_ms and modes_ms[fastest] >= modes_ms["default"] * (1 - margin):
        return "default"
    return fastest


def key(mode: str) -> str:
    """A timing's name for the original model compiled in `mode` ("compile" for the default mode, as before)."""
    return "compile" if mode == "default" else "compile_" + mode.replace("-", "_")


def prepared(module, mode: str, args, kwargs):
    """`module` as `mode` runs it: itself (eager), or torch.compile of it in that mode, called until compiled (and,
    with CUDA graphs, recorded) before it is timed. A CUDA-graph mode's calls each begin a new step, so that a call
    never waits on the outputs of another compiled model's graphs."""
    import torch

    if mode == "eager":
        return module
    compiled = torch.compile(module, mode=None if mode == "default" else mode)
    fn = compiled
    if mode in ("reduce-overhead", "max-autotune"):

        def fn(*a, **k):
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(*a, **k)

    with torch.no_grad():
        for _ in range(3 if mode != "default" else 1):  # CUDA graph trees record on a later call than the first
            fn(*args, **kwargs)
    return fn


class Swapped:
    """Calls `fn` with `names` (a module's attributes: name -> value) set in `module`, restored after."""

    def __init__(self, fn, module, names: dict):
        self.fn, self.module, self.names = fn, module, names

    def __call__(self, *args, **kwargs):
        saved = {n: getattr(self.module, n) for n in self.names}
        for n, v in self.names.items():
            setattr(self.module, n, v)
        try:
            return self.fn(*args, **kwargs)
        finally:
            for n, v in saved.items():
                setattr(self.module, n, v)

    def compiled(self, args, kwargs) -> Swapped:
        """The same model compiled (default mode), compiled and warmed up with its patch in place."""
        import torch

        ready = Swapped(torch.compile(self.fn), self.module, self.names)
        with torch.no_grad():
            ready(*args, **kwargs)
        return ready


def liger(model):
    """(a copy of `model` with Liger Kernel's patch, run with it in place: a Swapped, None), or (None, why not)."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type is None:
        return None, "not a transformers model"
    try:
        from liger_kernel.transformers.monkey_patch import (
            MODEL_TYPE_TO_APPLY_LIGER_FN,
            _apply_liger_kernel_to_instance,
        )
    except ModuleNotFoundError as exc:
        if exc.name == "liger_kernel":
            return None, "Liger Kernel is not installed (pip install liger-kernel)"
        return None, f"Liger Kernel does not load here (it needs {exc.name})"
    except Exception as exc:  # noqa: BLE001  (it imports Triton, which may not load here)
        return None, f"Liger Kernel does not load here ({type(exc).__name__}: {str(exc)[:160]})"
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        return None, f"Liger Kernel has no kernels for {model_type} models"
    module = sys.modules[type(model).__module__]
    before = dict(vars(module))
    patched = copy.deepcopy(model)
    try:
        _apply_liger_kernel_to_instance(model=patched, cross_entropy=False, fused_linear_cross_entropy=False)
    finally:
        changed = {n: v for n, v in vars(module).items() if before.get(n, _MISSING) is not v}
        for n in changed:
            if n in before:
                setattr(module, n, before[n])
            else:
                delattr(module, n)
    return Swapped(patched, module, changed), None


_MISSING = object()
