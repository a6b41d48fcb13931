"""A model's hot spots as tasks: each leaf module among the top spots becomes a KernelBench-format task file at the
inputs it was seen with (shapes, dtypes, integer bounds), holding the model's own weights for that module, and is
validated like any task before it is kept.

    DIR/<model>_<spot>.py        the task: Model wraps the torch.nn module, rebuilt from its constructor arguments
    DIR/<model>_<spot>.weights.pt  its state_dict, loaded by the task (absolute path: the evaluator reads the source)

Modules of one class, built alike (the same constructor call) and called at the same inputs share one task: its
kernel serves all of them (each with its own weights), and the task's share is theirs together.

A module of another installed package (transformers' Conv1D, a model's RMSNorm) becomes a task that imports its
class from that package, as the model did. What cannot become a task says why, and the others go on: an operator
of a forward (not a module), a module defined in the user's own file (its source would have to travel with the
task), one whose constructor arguments cannot be read back, one that failed validation.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cudagent.usermodel.inputs import Inputs, TensorSpec

_SAFE = re.compile(r"[^A-Za-z0-9_]+")


@dataclass
class Extracted:
    spot: str
    share: float
    task: str | None = None  # the task file, when the spot became one
    reason: str | None = None  # why it did not
    modules: list[str] = field(default_factory=list)  # every module the task's kernel serves
    kind: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def extract_spots(model, found, top: int, directory: Path, device: str, model_name: str) -> list[Extracted]:
    """The first `top` spots of `found` (hotspots.Hotspots of `model`) that become validated tasks, in `directory`:
    `top` counts tasks made. A spot that cannot become one is listed with why and does not count; nor does a spot
    that an earlier spot's task serves (the same module at the same inputs)."""
    from cudagent.data.seeds import constructor_call
    from cudagent.errors import CudagentError
    from cudagent.task import load_task, validate_task

    directory.mkdir(parents=True, exist_ok=True)
    stem = _SAFE.sub("_", model_name.split(":")[-1]).strip("_").lower()
    out: list[Extracted] = []
    shares = {s.spot: s.share for s in found.spots}
    counted = 0
    for spot in found.spots:
        served = next((e for e in out if e.task and spot.spot in e.modules), None)
        if served is None and counted == top:
            continue  # past the top: only what the chosen tasks serve is still listed
        item = Extracted(spot.spot, spot.share, kind=spot.kind)
        out.append(item)
        if served is not None:
            item.reason = f"the same module as {served.spot} at the same inputs: its task serves both"
            continue
        if ": " in spot.spot:
            item.reason = f"{spot.kind} is an operator of a forward, not a module; only modules become tasks so far"
            continue
        module = model.get_submodule(spot.spot)
        cls = type(module)
        spelling = _spelling(cls)
        if spelling is None:
            item.reason = (
                f"{cls.__name__} is defined in your own file, not in torch.nn or an installed package: its source "
                "would have to travel with the task"
            )
            continue
        inputs = found.module_inputs.get(spot.spot)
        if inputs is None or inputs.kwargs or not all(isinstance(a, TensorSpec) for a in inputs.args):
            item.reason = "its inputs are not tensors alone"
            continue
        try:
            call = constructor_call(module, *spelling[1:])
        except ValueError as exc:
            item.reason = f"{cls.__name__} cannot be rebuilt: {exc}"
            continue
        name = _SAFE.sub("_", f"{stem}_{spot.spot}").strip("_").lower()
        path, weights = directory / f"{name}.py", directory / f"{name}.weights.pt"
        _save_weights(module, weights)
        path.write_text(_render(spot, model_name, call, inputs, weights, _param_dtype(module), spelling[0]))
        try:
            validate_task(load_task(path), device)
        except CudagentError as exc:
            path.unlink()
            weights.unlink(missing_ok=True)
            item.reason = f"the task did not validate: {exc.message}"
            continue
        item.task = str(path)
        counted += 1
        item.modules = _alike(model, spot.spot, call, spelling, found.module_inputs)
        item.share = sum(shares.get(m, 0.0) for m in item.modules)
    return out


def _spelling(cls) -> tuple[str, str | None, dict | None] | None:
    """(the task's import line, the class's name in it, the namespace to check a call in) for a class a task can
    import by name; None for a class of the user's own file (loaded under a name nothing else can import)."""
    import importlib

    import torch

    if cls.__module__.startswith("torch.nn"):
        return ("", None, None)
    if cls.__module__ in ("__main__", "builtins") or cls.__module__.startswith("cudagent_user_"):
        return None
    if "." in cls.__qualname__ or "<" in cls.__qualname__:
        return None  # a nested or local class
    try:
        found = getattr(importlib.import_module(cls.__module__), cls.__qualname__, None)
    except Exception:  # noqa: BLE001  (any failure means: not importable by name)
        return None
    if found is not cls:
        return None
    alias = cls.__name__
    return (f"from {cls.__module__} import {alias}\n", alias, {alias: cls, "nn": torch.nn})


def _alike(model, path: str, call: str, spelling, module_inputs: dict) -> list[str]:
    """The modules of `model` that one kernel serves with `path`'s: same class, same constructor call, same inputs."""
    from cudagent.data.seeds import constructor_call

    module, seen = model.get_submodule(path), module_inputs.get(path)
    alike = []
    for name, other in model.named_modules():
        if type(other) is not type(module) or name not in module_inputs:
            continue
        if module_inputs[name].text() != seen.text():
            continue
        try:
            if constructor_call(other, *spelling[1:]) == call:
                alike.append(name)
        except ValueError:
            continue
    return alike


def _save_weights(module, path: Path) -> None:
    import torch

    torch.save({k: v.detach().to("cpu") for k, v in module.state_dict().items()}, path)


def _param_dtype(module) -> str | None:
    import torch

    first = next(iter(module.parameters()), None)
    return None if first is None or first.dtype == torch.float32 else str(first.dtype).removeprefix("torch.")


def _maker(spec: TensorSpec) -> str:
    shape = repr(tuple(spec.shape))
    if spec.dtype == "bool":
        return f"torch.rand({shape}) > 0.5"
    if spec.dtype.startswith("float") or spec.dtype == "bfloat16":
        return f"torch.randn({shape}, dtype=torch.{spec.dtype})"
    return f"torch.randint(0, {spec.high or 128}, {shape}, dtype=torch.{spec.dtype})"


def _render(spot, model_name: str, call: str, inputs: Inputs, weights: Path, dtype: str | None, imports: str) -> str:
    params = ", ".join(f"x{i}" for i in range(len(inputs.args)))
    to_dtype = f".to(torch.{dtype})" if dtype else ""
    makers = ", ".join(_maker(a) for a in inputs.args)
    share = f"{100 * spot.share:.1f}%"
    return f'''"""{spot.spot} ({spot.kind}) of {model_name}: {share} of its time.

At the inputs it was seen with, with the model's own weights; extracted by `cudagent hotspots --tasks`."""

import torch
import torch.nn as nn
{imports}
WEIGHTS = {str(weights.resolve())!r}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.op = {call}{to_dtype}
        self.op.load_state_dict(torch.load(WEIGHTS, weights_only=True))

    def forward(self, {params}):
        return self.op({params})


def get_inputs():
    return [{makers}]


def get_init_inputs():
    return []
'''
