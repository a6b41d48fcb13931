"""Seed tasks beyond the built-in operators: the leaf modules of a user's own model (with the shapes its
`get_inputs` gives them) and building blocks of `transformers` when it is installed.

A leaf module becomes a task only if it can be rebuilt from its constructor's arguments, read back from its
attributes, and the rebuilt module prints the same (`repr`) as the original; otherwise it is skipped with the reason.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from pathlib import Path

_SAFE = re.compile(r"[^A-Za-z0-9_]+")


@dataclass(frozen=True)
class SeedFile:
    name: str
    source: str


def from_module(path: Path) -> tuple[list[SeedFile], list[str]]:
    """Tasks for the leaf modules of the Model in `path` (a task file), each with the inputs it saw; and the reasons
    the others were skipped."""
    import torch

    from cudagent.task import load_task

    task = load_task(path)
    model = task.build_model(0, "cpu")
    seen: dict[str, tuple[torch.nn.Module, list]] = {}

    def hook(module, args):
        key = f"{type(module).__name__}:{module!r}:{[tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]}"
        seen.setdefault(key, (module, [a for a in args if isinstance(a, torch.Tensor)]))

    handles = [m.register_forward_pre_hook(hook) for m in model.modules() if not list(m.children()) and m is not model]
    try:
        task.run(model, task.make_inputs(0, "cpu"))
    finally:
        for h in handles:
            h.remove()
    seeds, skipped, names = [], [], set()
    for module, inputs in seen.values():
        cls = type(module)
        try:
            call = constructor_call(module)
        except ValueError as exc:
            skipped.append(f"{cls.__name__}: {exc}")
            continue
        if not cls.__module__.startswith("torch.nn"):
            skipped.append(f"{cls.__name__}: not a torch.nn module (its source would have to travel with the task)")
            continue
        base = _SAFE.sub("_", f"{path.stem}_{cls.__name__}").lower()
        name, i = base, 1
        while name in names:
            i += 1
            name = f"{base}_{i}"
        names.add(name)
        seeds.append(SeedFile(name, _render(cls, call, inputs, f"{cls.__name__} as used in {path.name}")))
    return seeds, skipped


def constructor_call(module, spelled: str | None = None, namespace: dict | None = None) -> str:
    """`nn.X(arg=value, ...)` that rebuilds `module`, checked by comparing the two modules' repr. Another class is
    spelled `spelled` (its name in `namespace`, which the check evaluates the call in)."""
    import torch

    cls = type(module)
    args = []
    for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in ("device", "dtype"):
            continue
        if not hasattr(module, p.name):
            if p.default is p.empty:
                raise ValueError(f"its argument {p.name!r} cannot be read back from the module")
            continue
        value = getattr(module, p.name)
        if p.name == "bias" and (value is None or isinstance(value, torch.Tensor)):
            value = value is not None
        if isinstance(value, torch.Tensor):
            if p.default is p.empty:
                raise ValueError(f"its argument {p.name!r} is a tensor")
            continue
        if not isinstance(value, (int, float, bool, str, tuple, list, type(None))):
            raise ValueError(f"its argument {p.name!r} is a {type(value).__name__}")
        args.append(f"{p.name}={value!r}")
    call = f"{spelled or 'nn.' + cls.__name__}({', '.join(args)})"
    rebuilt = eval(call, namespace or {"nn": torch.nn})  # noqa: S307  (a call we built from numbers and strings)
    if repr(rebuilt) != repr(module):
        raise ValueError(f"rebuilt as {rebuilt!r}, not {module!r}")
    return call


def _render(cls, call: str, inputs: list, doc: str) -> str:
    import torch

    makers = []
    for x in inputs:
        shape = ", ".join(str(d) for d in x.shape)
        if x.is_floating_point():
            dtype = "" if x.dtype == torch.float32 else f", dtype={x.dtype}"
            makers.append(f"torch.randn({shape}{dtype})" if shape else f"torch.randn((){dtype})")
        else:
            high = int(x.max().item()) + 1 if x.numel() else 2
            makers.append(f"torch.randint(0, {max(2, high)}, ({shape},), dtype={x.dtype})")
    params = ", ".join(f"x{i}" for i in range(len(inputs)))
    return f'''"""{doc}: a seed task."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.op = {call}

    def forward(self, {params}):
        return self.op({params})


def get_inputs():
    return [{", ".join(makers)}]


def get_init_inputs():
    return []
'''


TRANSFORMERS_SEEDS = {
    "hf_gelu_new": ("from transformers.activations import NewGELUActivation", "NewGELUActivation()", (64, 128, 768)),
    "hf_quick_gelu": ("from transformers.activations import QuickGELUActivation", "QuickGELUActivation()",
                      (64, 128, 768)),
    "hf_llama_rms_norm": ("from transformers.models.llama.modeling_llama import LlamaRMSNorm", "LlamaRMSNorm(1024)",
                          (16, 256, 1024)),
    "hf_llama_mlp": (
        "from transformers import LlamaConfig\nfrom transformers.models.llama.modeling_llama import LlamaMLP",
        "LlamaMLP(LlamaConfig(hidden_size=512, intermediate_size=1376, hidden_act='silu'))",
        (8, 128, 512),
    ),
    "hf_t5_layer_norm": ("from transformers.models.t5.modeling_t5 import T5LayerNorm", "T5LayerNorm(768)",
                         (16, 128, 768)),
}  # fmt: skip


def transformers_seeds() -> list[SeedFile]:
    """Building blocks of transformers (activations, norms, an MLP block of a small config), when installed."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return []
    seeds = []
    for name, (imports, call, shape) in TRANSFORMERS_SEEDS.items():
        dims = ", ".join(map(str, shape))
        source = f'''"""{call} from transformers on a {"x".join(map(str, shape))} input: a seed task."""

import torch
import torch.nn as nn
{imports}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = {call}

    def forward(self, x):
        return self.block(x)


def get_inputs():
    return [torch.randn({dims})]


def get_init_inputs():
    return []
'''
        seeds.append(SeedFile(name, source))
    return seeds
