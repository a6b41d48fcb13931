"""A user's model's kernels as one Python package that needs nothing from cudagent: `patch(model)` puts each
kernel in place of the modules it serves.

    DEST/__init__.py       patch(model, spots=None) and SPOTS
    DEST/spots.json        per spot: the module paths it serves, its class, its share of the model's time, the
                           speedup its run measured, the run and commit it came from
    DEST/spots/<name>/     the spot's kernel as an exported package (cudagent/agent/export.py): ModelNew, its
                           kernels, their build (on first import, cached)

A replacement is the spot's ModelNew holding the replaced module's own weights (its state_dict under `op.`, the
task's layout, which the evaluator already required of ModelNew strictly), on that module's device and dtype. The
same package is what `cudagent optimize` puts back to prove the speedup (delivery.put_back) and what `cudagent export`
writes: one way from a run to a patched model.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from cudagent.agent.export import export_package
from cudagent.errors import CudagentError

INIT = '''"""The kernels cudagent wrote for {model} ({origin}).

    import {package}
    {package}.patch(model)      # every spot; patch(model, spots=["fc1"]) for some

Each spot's kernels are built on first use (CUDA sources where a GPU is visible, C++ otherwise) and cached in
spots/<name>/_build/. SPOTS lists what goes where (spots.json).
"""

import importlib
import json
from pathlib import Path

SPOTS = json.loads((Path(__file__).resolve().parent / "spots.json").read_text())


def patch(model, spots=None):
    """Put each spot's kernel in place of the modules it serves, with their own weights; return the paths of the
    modules replaced. `spots`: the names of the spots to apply (default: all of them)."""
    replaced = []
    for spot in SPOTS:
        if spots is not None and spot["name"] not in spots:
            continue
        kernel = importlib.import_module(f"{{__name__}}.spots.{{spot['name']}}")
        for path in spot["modules"]:
            original = model.get_submodule(path)
            new = kernel.ModelNew()
            new.load_state_dict({{"op." + k: v for k, v in original.state_dict().items()}}, strict=True)
            tensors = list(original.parameters()) + list(original.buffers())
            if tensors:
                new.to(device=tensors[0].device)
                if tensors[0].is_floating_point():
                    new.to(dtype=tensors[0].dtype)
            else:
                first = next(iter(model.parameters()), None)
                if first is not None:
                    new.to(device=first.device)
            new.train(original.training)
            parent_path, _, name = path.rpartition(".")
            setattr(model.get_submodule(parent_path) if parent_path else model, name, new)
            replaced.append(path)
    return replaced
'''

_NAME = re.compile(r"[^A-Za-z0-9_]+")


def spot_name(path: str) -> str:
    """A module path as a Python identifier: blocks.0.fc1 -> blocks_0_fc1."""
    name = _NAME.sub("_", path).strip("_") or "model"
    return name if name[0].isalpha() else f"m_{name}"


def write_package(spots: list[dict], dest: Path, model: str, origin: str, force: bool = False) -> Path:
    """`spots`: dicts with name, modules, kind, share, speedup_vs_eager, run_id, commit and `files` (the workspace's
    files at that commit). Returns the package's path."""
    dest = write_kernel_folders(spots, dest, "spots", "One exported kernel package per spot.", force, "spot")
    (dest / "__init__.py").write_text(INIT.format(model=model, origin=origin, package=dest.name))
    return dest.resolve()


def write_kernel_folders(entries: list[dict], dest: Path, folder: str, doc: str, force: bool, what: str) -> Path:
    """What every kernels package of a model run holds (this one and region_package.py's): DEST/<folder>/<name>/,
    each entry's kernel as an exported package, and DEST/<folder>.json listing the entries (without their files).
    DEST is replaced only with `force` and only if it is such a package. Returns DEST (its __init__.py is the
    caller's)."""
    dest = dest.expanduser()
    if not dest.name.isidentifier():
        raise CudagentError(f"{dest.name!r} is not a valid Python package name; choose a name like fast_block")
    if not entries:
        raise CudagentError(f"no {what} has a verified kernel to put in the package")
    if dest.exists():
        if not force:
            raise CudagentError(f"{dest} already exists; choose a new directory or pass --force to replace it")
        if not (dest / f"{folder}.json").is_file():
            raise CudagentError(f"{dest} exists and is not a package cudagent wrote; refusing to replace it")
        shutil.rmtree(dest)
    (dest / folder).mkdir(parents=True)
    (dest / folder / "__init__.py").write_text(f'"""{doc}"""\n')
    listed = []
    for entry in entries:
        origin = f"{entry['run_id']} commit {entry['commit']}"
        export_package(entry["files"], dest / folder / entry["name"], origin=origin)
        listed.append({k: v for k, v in entry.items() if k != "files"})
    (dest / f"{folder}.json").write_text(json.dumps(listed, indent=1) + "\n")
    return dest
