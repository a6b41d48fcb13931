"""A user's model's region kernels as one Python package that needs nothing from cudagent: `patch(model, *inputs)`
returns the model's graph with each region replaced by a call of its kernel, registered as a `torch.library`
custom op with a fake implementation, so that `torch.compile` of the result traces it without a graph break.

    DEST/__init__.py       patch(model, *args, kinds=None, **kwargs) and KINDS
    DEST/kinds.json        per kind: its op, the regions it serves (the exported graph's node names and what each
                           calls, their inputs, weights and outputs), its share, the speedups its run measured,
                           the run and commit it came from
    DEST/_putback.py       cudagent/usermodel/putback.py as it is (torch only): the same capture, ops and rewrite
                           cudagent's proof used
    DEST/kinds/<name>/     the kind's kernel as an exported package (cudagent/agent/export.py): ModelNew, its
                           kernels, their build (on first import, cached)

A region is named by the nodes of the model's graph as torch.export makes it at the inputs the model was optimized
at; `patch` captures the graph again and refuses, in one sentence, a graph whose nodes are not those (the model or
its input shapes changed since).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from cudagent.usermodel.package import write_kernel_folders

INIT = '''"""The region kernels cudagent wrote for {model} ({origin}).

    import {package}
    fast = {package}.patch(model, *example_inputs)     # every kind; kinds=["..."] for some
    fast = torch.compile(fast)                          # the kernels are custom ops: no graph break

`patch` captures the model's graph (torch.export) at the example inputs (their shapes: {inputs}) and returns it
with each fusion region replaced by its kernel; the model's own weights are used, not copied. A kernel bound as a
C++ operator (TORCH_LIBRARY) is called by the graph directly (no Python per call; CUDA graphs can take it), any
other through a Python custom op; `fast.bound` says which, kind by kind. Each kind's kernels
are built on first use (CUDA sources where a GPU is visible, C++ otherwise) and cached in kinds/<name>/_build/.
KINDS lists what goes where (kinds.json).
"""

import importlib
import json
from pathlib import Path

from . import _putback

KINDS = json.loads((Path(__file__).resolve().parent / "kinds.json").read_text())
INPUTS = {inputs!r}


def patch(model, *args, kinds=None, **kwargs):
    """The model (called with these example inputs) as its graph with each kind's regions calling its kernel.
    `kinds`: the names of the kinds to put back (default: all of them)."""
    import torch

    program = _putback.capture(model, args, kwargs)
    first = next((t for t in list(args) + list(kwargs.values()) if isinstance(t, torch.Tensor)), None)
    device = first.device if first is not None else next(model.parameters()).device
    ops, bound = {{}}, {{}}
    for entry in KINDS:
        if kinds is not None and entry["name"] not in kinds:
            continue
        regions = [_putback.spec(r) for r in entry["regions"]]
        for region in regions:
            why = _putback.check(program, region)
            if why:
                raise RuntimeError(
                    f"{{entry['name']}}: the model's graph is not the one its kernel was made for ({{why}}); call "
                    f"patch with inputs of the shapes it was optimized at ({{INPUTS}}), or optimize the model again"
                )
        kernel = importlib.import_module(f"{{__name__}}.kinds.{{entry['name']}}").ModelNew()
        kernel.to(device=device).eval()
        binding = _putback.bind(regions[0], program, kernel)
        bound[entry["name"]] = binding.how
        for region in regions:
            ops[region.name + "|" + region.nodes[0]] = (region, binding.target)
    patched = _putback.rewrite(program, ops)
    patched.bound = bound  # kind -> "operator <its own>", or "Python: <why its kernel could not be traced>"
    return patched
'''


def region_entry(region, program) -> dict:
    """A region as kinds.json stores it (putback.spec reads it back)."""
    from cudagent.usermodel.putback import node_targets

    return {
        "name": region.name,
        "kind": region.kind,
        "nodes": list(region.nodes),
        "targets": node_targets(program, region.nodes),
        "inputs": list(region.inputs),
        "weights": list(region.weights),
        "outputs": list(region.outputs),
        "modules": list(region.modules),
    }


def write_region_package(
    kinds: list[dict], dest: Path, model: str, origin: str, inputs: str, force: bool = False
) -> Path:
    """`kinds`: dicts with name, kind, regions (region_entry), share, speedups, run_id, commit and `files` (the
    workspace's files at that commit). Returns the package's path."""

    dest = write_kernel_folders(
        kinds, dest, "kinds", "One exported kernel package per kind of region.", force, "region"
    )
    shutil.copy2(Path(__file__).with_name("putback.py"), dest / "_putback.py")
    (dest / "__init__.py").write_text(INIT.format(model=model, origin=origin, package=dest.name, inputs=inputs))
    return dest.resolve()
