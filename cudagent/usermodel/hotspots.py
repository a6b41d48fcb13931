"""Where a model's time goes: its forward run under torch.profiler, each operator's own time attributed to the
module whose forward ran it.

Every module's forward is labelled (a record_function range per call). An operator inside a leaf module (one with
no children: Linear, LayerNorm, GELU...) counts for that module; an operator a non-leaf module's own forward calls
(attention's matmul and softmax, a residual add) counts as a spot of its own, `<module>: <op>` at its shapes, with
the time of every operator beneath it. Times are device time on CUDA (the kernels each operator launched), CPU time
on the CPU, per model call (the profiled calls, after warm-up ones, divided out).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from cudagent.usermodel.inputs import InputSpecError, describe

LABEL = "cudagent.module::"


@dataclass
class Spot:
    rank: int
    spot: str  # the module's path (`layers.0.mlp.fc1`), or `<module>: <op>` for an op of a non-leaf forward
    kind: str  # the module's class (Linear) or the operator (aten::softmax)
    ms: float  # per model call
    share: float  # of the model's attributed time
    calls: float  # per model call
    shapes: list[str] = field(default_factory=list)  # of its tensor inputs, as first seen
    dtypes: list[str] = field(default_factory=list)


@dataclass
class Hotspots:
    model: str
    device: str
    iterations: int
    total_ms: float  # attributed time per model call
    wall_ms: float  # one model call, end to end, outside the profiler (median of the timed calls)
    spots: list[Spot]
    module_inputs: dict = field(default_factory=dict)  # module path -> Inputs of its first call (extract.py)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("module_inputs")
        return {**d, "spots": [asdict(s) for s in self.spots]}

    def table(self, top: int = 15) -> list[list[str]]:
        rows = [["#", "spot", "kind", "share", "ms/call", "calls", "shapes", "dtypes"]]
        for s in self.spots[:top]:
            rows.append(
                [
                    str(s.rank),
                    s.spot,
                    s.kind,
                    f"{100 * s.share:.1f}%",
                    f"{s.ms:.4f}",
                    f"{s.calls:g}",
                    " ".join(s.shapes),
                    " ".join(sorted(set(s.dtypes))),
                ]
            )
        return rows

    def markdown(self, top: int = 15) -> str:
        rows = self.table(top)
        head = (
            f"# Hot spots of {self.model}\n\n{self.device}, {self.iterations} profiled calls; one call takes "
            f"{self.wall_ms:.3f} ms end to end, {self.total_ms:.3f} ms of it attributed below.\n\n"
        )
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * len(rows[0])]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return head + "\n".join(lines) + "\n\n![time per spot](hotspots.png)\n"

    def chart(self, path: str, top: int = 15) -> None:
        """Bars of each spot's share, ranked, each named by its rank and spot (cut to 32 characters)."""
        from cudagent.png import BLUE, bar_plot

        def name(s) -> str:
            label = f"{s.rank} {s.spot}"
            return label if len(label) <= 32 else label[:31] + "."

        bar_plot([(name(s), s.share, f"{100 * s.share:.1f}%", BLUE) for s in self.spots[:top]], path)


class ForwardFailed(Exception):
    """The model's own forward raised (its cause): the user's to mend, unlike a failure of the profiling around it."""


def profile_user_model(user, model, args: list, kwargs: dict, device: str, iterations: int = 5):
    """find_hotspots on a user's model (loading.UserModel), its forward's failure said as one sentence."""
    from cudagent.usermodel.loading import UserModelError

    try:
        return find_hotspots(model, args, kwargs, device, user.name, iterations)
    except ForwardFailed as failed:
        exc = failed.__cause__
        raise UserModelError(
            f"{user.name} raised {type(exc).__name__} on the inputs {user.inputs.text()}: {str(exc).splitlines()[0]}; "
            "check --inputs (or the script's call)"
        ) from None


def find_hotspots(model, args: list, kwargs: dict, device: str, name: str, iterations: int = 5, warmup: int = 2):
    """Profile `iterations` calls of model(*args, **kwargs) on `device` (after `warmup` calls) and rank the spots."""
    import os
    import warnings

    import torch

    # kineto prints its own start and stop lines ("USDT: ... profiler_start") on stderr at every level but this,
    # read when the profiler first starts; a user who wants them sets the variable
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = device.startswith("cuda")
    named = dict(model.named_modules())
    leaves = {n for n, m in named.items() if not list(m.children())}
    first_inputs: dict[str, tuple[list[str], list[str]]] = {}
    module_inputs: dict = {}
    open_ranges: list = []

    def pre(path):
        def hook(mod, hook_args):
            if path not in first_inputs:
                tensors = [a for a in hook_args if isinstance(a, torch.Tensor)]
                first_inputs[path] = (_shapes(tensors), [str(t.dtype).removeprefix("torch.") for t in tensors])
                try:
                    module_inputs[path] = describe(hook_args, {})
                except InputSpecError:
                    pass  # a list of tensors: shown, never extracted
            rf = record_function(LABEL + path)
            rf.__enter__()
            open_ranges.append(rf)

        return hook

    def post(mod, hook_args, output):
        open_ranges.pop().__exit__(None, None, None)

    handles = []
    for path, mod in named.items():
        handles.append(mod.register_forward_pre_hook(pre(path)))
        handles.append(mod.register_forward_hook(post))

    def sync():
        if cuda:
            torch.cuda.synchronize()

    try:
        with torch.no_grad():
            for _ in range(warmup):
                model(*args, **kwargs)
            sync()
            walls = []
            for _ in range(iterations):  # end to end, outside the profiler (the labels stay: they cost little)
                start = time.perf_counter()
                model(*args, **kwargs)
                sync()
                walls.append(time.perf_counter() - start)
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            with warnings.catch_warnings():  # torch's note on profiler cycles (one cycle here) is not the user's
                warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
                with profile(activities=activities, record_shapes=True) as prof:
                    for _ in range(iterations):
                        model(*args, **kwargs)
                    sync()
    except Exception as exc:  # noqa: BLE001  (the user's forward on these inputs)
        raise ForwardFailed() from exc
    finally:
        for h in handles:
            h.remove()
    found = _rank(prof.events(), leaves, named, first_inputs, cuda, iterations, name, device, sorted(walls))
    found.module_inputs = module_inputs
    return found


def _rank(events, leaves, named, first_inputs, cuda, iterations, name, device, walls) -> Hotspots:
    time_us: dict[tuple, float] = defaultdict(float)
    calls: dict[tuple, int] = defaultdict(int)
    op_shapes: dict[tuple, tuple[list[str], list[str]]] = {}
    from torch.autograd import DeviceType

    for e in events:
        if e.device_type != DeviceType.CPU:
            continue  # a kernel: its time is its launching operator's device time
        if e.name.startswith(LABEL):
            path = e.name[len(LABEL) :]
            if path in leaves:
                calls[(path, None)] += 1
            continue
        label, top = _owner(e)
        if label is None:
            continue  # outside the model's forward (the profiler's own, a synchronize)
        path = label.name[len(LABEL) :]
        own = e.self_device_time_total if cuda else e.self_cpu_time_total
        if path in leaves:
            time_us[(path, None)] += own
        else:
            key = (path, top.name, tuple(map(tuple, top.input_shapes or [])))
            time_us[key] += own
            if top is e:
                calls[key] += 1
                op_shapes.setdefault(key, _op_inputs(top))
    total = sum(time_us.values()) or 1.0
    spots = []
    for key, us in sorted(time_us.items(), key=lambda kv: -kv[1]):
        path = key[0]
        if key[1] is None:
            kind = type(named[path]).__name__
            shapes, dtypes = first_inputs.get(path, ([], []))
            spot = path or "(model)"
        else:
            kind = key[1]
            shapes, dtypes = op_shapes.get(key, ([], []))
            spot = f"{path or '(model)'}: {key[1]}"
        spots.append(Spot(0, spot, kind, us / 1000 / iterations, us / total, calls[key] / iterations, shapes, dtypes))
    for i, s in enumerate(spots, 1):
        s.rank = i
    wall_ms = 1000 * walls[len(walls) // 2]
    return Hotspots(name, device, iterations, total / 1000 / iterations, wall_ms, spots)


def _owner(e):
    """(the innermost module label above an op, the op right below that label); (None, None) outside the model."""
    top, parent = e, e.cpu_parent
    while parent is not None and not parent.name.startswith(LABEL):
        top, parent = parent, parent.cpu_parent
    return parent, top


def _shapes(tensors) -> list[str]:
    return ["x".join(map(str, t.shape)) or "scalar" for t in tensors]


# the profiler's names of C++ scalar types, as torch names the dtypes
_C_TYPES = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "long int": "int64",
    "int": "int32",
    "short int": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
}


def _op_inputs(event) -> tuple[list[str], list[str]]:
    """The shapes and dtypes of an operator's tensor inputs (scalars and lists left out)."""
    shapes = event.input_shapes or []
    dtypes = getattr(event, "input_dtypes", None) or ["?"] * len(shapes)  # torch < 2.12 records shapes only
    pairs = [(s, d) for s, d in zip(shapes, dtypes, strict=False) if s]
    return ["x".join(map(str, s)) for s, _ in pairs], [_C_TYPES.get(d, d) for _, d in pairs]
