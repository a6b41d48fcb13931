"""A fusion region (regions.py) as something that runs on its own: a graph of its operators, its measured time in
the model, and a KernelBench-format task holding the model's own weights.

    values = record_values(program, args, kwargs)     every node's value in one run of the model's graph
    gm = region_module(program, region)                 the region's operators; its weights as attributes
    measure(regions, program, values, device)           each region's time alone, and its share
    path = write_task(region, gm, values, directory, context)

The task's Model runs the region's operators as the graph recorded them (aten calls), so the reference is exactly
what the model computes there; its docstring tells the agent which model the region came from, its share of the
model's time, that the kernel will run inside torch.compile's graph, and what fusing it saves.
"""

from __future__ import annotations

from pathlib import Path

from cudagent.usermodel.putback import attribute_name, region_graph, weights_of  # noqa: F401  (re-exported)
from cudagent.usermodel.regions import Region


def region_module(program, region: Region, weights_as_inputs: bool = False):
    """The region's operators as a GraphModule (putback.region_graph: the same graph the put-back's op runs)."""
    return region_graph(program, region, weights_as_inputs)


def lifted_inputs(program, args: tuple, kwargs: dict | None = None) -> list:
    """The graph module's inputs in its placeholders' order: the lifted parameters, buffers and constants, then the
    user's inputs, flattened as export flattened them."""
    import torch.utils._pytree as pytree

    user = iter(pytree.tree_leaves((tuple(args), kwargs or {})))
    state = program.state_dict
    out = []
    for spec in program.graph_signature.input_specs:
        kind = spec.kind.name
        if kind in ("PARAMETER", "BUFFER"):
            out.append(state[spec.target] if spec.target in state else program.constants[spec.target])
        elif kind in ("CONSTANT_TENSOR", "CUSTOM_OBJ"):
            out.append(program.constants[spec.target])
        else:
            out.append(next(user))
    return out


def record_values(program, args: tuple, kwargs: dict | None = None) -> dict:
    """node name -> its value, in one run of the graph on these inputs (no gradients)."""
    import torch
    import torch.fx

    values: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n.name] = result
            return result

    with torch.no_grad():
        Recorder(program.graph_module).run(*lifted_inputs(program, args, kwargs))
    return values


def measure(regions: list[Region], program, values: dict, device: str, whole=None) -> tuple[float | None, str | None]:
    """Each region's time alone on `device` (region_timing.py: rounds interleaved with the others and with `whole`,
    the model's own call), its rounds' spread and its share of their sum; (the whole's time per call, a note when
    the parts and the whole disagree)."""
    import torch

    from cudagent.usermodel.region_timing import time_in_rounds

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    calls = []
    for region in regions:
        gm = region_module(program, region).to(device)
        inputs = [values[n] for n in region.inputs]
        calls.append(lambda gm=gm, inputs=inputs: gm(*inputs))
    with torch.no_grad():
        parts, whole_rounds, note = time_in_rounds(calls, whole, sync)
    for region, rounds in zip(regions, parts):
        region.ms, region.spread = rounds.median, rounds.spread
    total = sum(r.ms or 0.0 for r in regions) or 1.0
    for region in regions:
        region.share = (region.ms or 0.0) / total
    return (whole_rounds.median if whole_rounds else None), note


def _maker(value) -> str:
    shape = repr(tuple(value.shape))
    dtype = str(value.dtype).removeprefix("torch.")
    if value.is_floating_point():
        return f"torch.randn({shape}, dtype=torch.{dtype})"
    if dtype == "bool":
        return f"torch.rand({shape}) > 0.5"
    high = int(value.max().item()) + 1 if value.numel() else 1
    return f"torch.randint(0, {max(high, 1)}, {shape}, dtype=torch.{dtype})"


def write_task(region: Region, gm, values: dict, directory: Path, stem: str, context: str) -> Path:
    """The region as a KernelBench-format task in `directory` (`<stem>.py`, its weights in `<stem>.weights.pt`)."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    path, weights = directory / f"{stem}.py", directory / f"{stem}.weights.pt"
    torch.save({k: v.detach().to("cpu") for k, v in gm.state_dict().items()}, weights)
    code = gm.code.strip("\n")
    body = "\n".join("    " + line if line.strip() else "" for line in code.splitlines())
    makers = ", ".join(_maker(values[n]) for n in region.inputs)
    return _write(path, TEMPLATE.format(context=context, weights=str(weights.resolve()), body=body, makers=makers))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


TEMPLATE = '''"""{context}"""

import torch
import torch.nn as nn
from torch import device  # noqa: F401  (the graph's calls may name devices)

inf, nan = float("inf"), float("nan")
WEIGHTS = {weights!r}


class Model(nn.Module):
    """The region's operators as the model's graph recorded them, with the model's own weights."""

    def __init__(self):
        super().__init__()
        for name, tensor in torch.load(WEIGHTS, weights_only=True).items():
            if tensor.is_floating_point():  # weights: parameters, as the model's were
                self.register_parameter(name, nn.Parameter(tensor, requires_grad=False))
            else:
                self.register_buffer(name, tensor)

{body}


def get_inputs():
    return [{makers}]


def get_init_inputs():
    return []
'''
