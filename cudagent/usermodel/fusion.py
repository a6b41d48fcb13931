"""A user's model's fusion regions, measured and ranked, and the first of them as tasks.

    report = region_report(model, args, kwargs, device, name)    capture, group, measure, rank (regions.py)
    tasks = region_tasks(report, top, directory, device)          KernelBench-format tasks, validated

Regions are ranked by the time the regions of their kind hold together (each measured alone on the model's device,
on the values one run of the model gave it, in rounds interleaved with the others and the whole model:
region_timing.py) and, at equal time, by the bytes fusing them saves. Alike regions (one
kind) are one task: its kernel serves every one of them, each with its own weights.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.usermodel.regions import VIEWS, Region

_SAFE = re.compile(r"[^A-Za-z0-9_]+")


@dataclass
class Kind:
    """The regions one kernel serves."""

    kind: str
    regions: list[Region]
    ms: float  # together, per model call
    share: float
    fused_bytes: int  # together
    task: str | None = None
    reason: str | None = None

    @property
    def spread(self) -> tuple[float, float] | None:
        """Together, from their rounds' fastest to their slowest (region_timing.py)."""
        if not all(r.spread for r in self.regions):
            return None
        return sum(r.spread[0] for r in self.regions), sum(r.spread[1] for r in self.regions)

    @property
    def first(self) -> Region:
        return self.regions[0]

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.first.name,
            "anchor": self.first.anchor,
            "ops": self.first.ops,
            "regions": [r.name for r in self.regions],
            "modules": [m for r in self.regions for m in r.modules],
            "ms": round(self.ms, 5),
            "spread_ms": [round(x, 5) for x in self.spread] if self.spread else None,
            "share": round(self.share, 4),
            "fused_bytes": self.fused_bytes,
            "task": self.task,
            "reason": self.reason,
        }


@dataclass
class RegionReport:
    model: str
    device: str
    dtype: str
    kinds: list[Kind] = field(default_factory=list)
    program: object = None
    values: dict = field(default_factory=dict)
    whole_ms: float | None = None  # one call of the whole model, timed in the regions' rounds
    note: str | None = None  # the regions' times disagree with the whole's (region_timing.py)

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "device": self.device,
            "dtype": self.dtype,
            "whole_ms": self.whole_ms,
            "note": self.note,
            "kinds": [k.to_dict() for k in self.kinds],
        }

    def table(self, top: int = 15) -> list[list[str]]:
        rows = [["#", "region", "operators", "alike", "share", "ms/call", "rounds", "fusion saves"]]
        for i, k in enumerate(self.kinds[:top], 1):
            ops = " + ".join(o for o in k.first.shown_ops() if o not in _QUIET)
            rows.append(
                [
                    str(i),
                    k.first.name,
                    ops,
                    str(len(k.regions)),
                    f"{100 * k.share:.1f}%",
                    f"{k.ms:.4f}",
                    f"{k.spread[0]:.4f}-{k.spread[1]:.4f}" if k.spread else "-",
                    _bytes(k.fused_bytes),
                ]
            )
        return rows

    def markdown(self, top: int = 15) -> str:
        rows = self.table(top)
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * len(rows[0])]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        head = f"# Fusion regions of {self.model} ({self.dtype}, {self.device})\n\n"
        if self.whole_ms:
            head += f"One call of the whole model: {self.whole_ms:.4f} ms, timed in the same rounds.\n\n"
        if self.note:
            head += f"Note: {self.note}.\n\n"
        return head + "\n".join(lines) + "\n"


_QUIET = VIEWS | {"alias"}  # operators a person reading the table does not need


def _bytes(n: int) -> str:
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def region_report(model, args: tuple, kwargs: dict, device: str, name: str) -> RegionReport:
    from cudagent.usermodel.region_task import measure, record_values
    from cudagent.usermodel.regions import capture, group

    program = capture(model, args, kwargs)
    regions = group(program)
    values = record_values(program, args, kwargs)
    with_inputs = (lambda: model(*args, **kwargs)) if model is not None else None
    whole_ms, note = measure(regions, program, values, device, with_inputs)
    by_kind: dict[str, list[Region]] = {}
    for region in regions:
        by_kind.setdefault(region.kind, []).append(region)
    kinds = [
        Kind(kind, rs, sum(r.ms or 0.0 for r in rs), sum(r.share or 0.0 for r in rs), sum(r.fused_bytes for r in rs))
        for kind, rs in by_kind.items()
    ]
    kinds.sort(key=lambda k: (-k.ms, -k.fused_bytes))
    first = next((p for p in model.parameters() if p.is_floating_point()), None)
    dtype = str(first.dtype).removeprefix("torch.") if first is not None else "float32"
    return RegionReport(name, device, dtype, kinds, program, values, whole_ms, note)


def region_tasks(report: RegionReport, top: int, directory: Path, device: str) -> list[Kind]:
    """The first `top` kinds of `report` that become validated tasks, in `directory` (`top` counts tasks made);
    the kinds tried on the way that could not become one are returned too, each saying why."""
    from cudagent.errors import CudagentError
    from cudagent.task import load_task, validate_task
    from cudagent.usermodel.region_task import region_module, write_task

    stem = _SAFE.sub("_", report.model.split(":")[-1]).strip("_").lower()
    done = []
    for kind in report.kinds:
        if sum(1 for k in done if k.task) == top:
            break
        region = kind.first
        if not region.inputs:
            kind.reason = "it reads only the model's weights (a constant): nothing to compute per call"
            done.append(kind)
            continue
        gm = region_module(report.program, region)
        where = _SAFE.sub("_", region.modules[0] if region.modules else "model").strip("_").lower()[:40]
        name = f"{stem}_{where}_{region.kind}".replace("-", "_")
        namespace = name if name[:1].isalpha() else f"k_{name}"  # a C++ and a Python name
        path = write_task(region, gm, report.values, directory, name, context(report, kind, namespace))
        try:
            validate_task(load_task(path), device)
        except CudagentError as exc:
            kind.reason = f"the task did not validate: {exc.message}"
            path.unlink(missing_ok=True)
            Path(str(path).removesuffix(".py") + ".weights.pt").unlink(missing_ok=True)
        else:
            kind.task = str(path)
        done.append(kind)
    return done


def context(report: RegionReport, kind: Kind, namespace: str) -> str:
    """What the agent is told of the region: where it comes from, what it holds, where its kernel will run and how
    to bind it so that the model's graph calls it with no Python in between (an operator in `namespace`)."""
    region = kind.first
    alike = (
        f" It occurs {len(kind.regions)} times (one kernel serves all, each with its own weights)."
        if len(kind.regions) > 1
        else ""
    )
    ops = " + ".join(o for o in region.shown_ops() if o not in _QUIET)
    return (
        f"A fusion region of {report.model} ({report.dtype}, {report.device}): {region.name} ({region.anchor}).\n\n"
        f"Operators: {ops}, from the modules {', '.join(region.modules) or '(the model itself)'}.{alike}\n"
        f"It holds {100 * kind.share:.1f}% of the model's region time ({kind.ms:.4f} ms a call, each region measured "
        "alone).\n"
        f"Fusing it into one kernel saves {_bytes(kind.fused_bytes)} of memory traffic a call: the values it makes "
        "and uses inside, each written once and read back.\n"
        "Your kernel will run inside torch.compile's graph as a custom op (torch.library, with a fake "
        "implementation): inductor fuses the model's other work around it, not into it, so it must beat what "
        "inductor makes of these operators, not eager mode alone. Inputs: the activations it reads "
        f"({', '.join(region.inputs)}); the model's weights are the Model's parameters.\n"
        + (
            f"The task's forward builds a value from its inputs' shapes alone ({len(region.folded)} operators from "
            "`arange`s: the model's attention mask), the same on every call at these shapes: your kernel may know "
            "it (a causal mask: skip the blocks it masks) rather than build or read it.\n"
            if region.folded
            else ""
        )
        + f"Bind the kernel as a C++ operator: `TORCH_LIBRARY({namespace}, m)` defining its schema, "
        f"`TORCH_LIBRARY_IMPL({namespace}, CUDA, m)` (CPU on the CPU) with the kernel's launcher and "
        f"`TORCH_LIBRARY_IMPL({namespace}, Meta, m)` returning empty outputs of the right shapes, and call it from "
        f"ModelNew.forward as `torch.ops.{namespace}.<name>(...)`: the model's graph then calls your operator "
        "itself (no Python per call, CUDA graphs can capture it). A pybind11 function works too, but runs behind "
        "a Python call on every call of the model."
    )
