"""Tasks from seed operators: one op alone (a seed task), or a chain of 1-5 whose shapes fit (a fused task), drawn
reproducibly from a seed number, rendered as a KernelBench-style task file.

Sizes are drawn so that the activation holds about `elements` values (a range per scale: small for the CPU). At the
GPU scale the batch is then sized so that a cost model of the chain (bytes moved and flops on an H100-class GPU,
`estimated_ms`) lands inside a target drawn from the paper's 1-100 ms window, and chains too light to get there
within the memory cap are not drawn (on the H100, sizing by elements alone left 62% of the tasks under 1 ms: a
reduction early in a chain leaves little work after it). The runtime filter still decides.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from cudagent.data.ops import BY_NAME, OPS, Op, Shape

# elements of the input activation, per scale: (low, high), drawn log-uniformly
# (the GPU's: an elementwise pass over 2^24 fp32 values takes ~0.05 ms on an H100, so chains need 2^25-2^28 to land
# in the paper's 1-100 ms window; from 2^24, a third of the H100 run's tasks ran under 1 ms)
SCALES = {"cpu": (1 << 14, 1 << 18), "gpu": (1 << 25, 1 << 28)}
# the estimated runtime (ms) a scale's tasks are sized for, drawn log-uniformly; no entry: sized by elements alone
TARGET_MS = {"gpu": (3.0, 40.0)}
# the cost model's GPU: an H100's sustained bandwidth and FP32 rates, and eager's cost per launched op
BYTES_PER_MS, MATMUL_FLOPS_PER_MS, CONV_FLOPS_PER_MS, LAUNCH_MS = 2.5e9, 4e10, 2e10, 0.01
# full passes over the activation an op makes in eager mode (reads and writes), by name or kind
# (calibrated on 113 tasks timed on the H100: measured/estimated median 0.89, 80% of them within 0.6-2x)
PASSES = {"elementwise": 2, "rowwise": 3, "reduction": 3, "norm": 4, "rms_norm": 7, "cumsum": 8, "pool": 1.25,
          "linear": 1, "conv": 1}  # fmt: skip
MAX_ELEMENTS = 1 << 28  # no activation over 1 GiB in fp32: several workers share one GPU


@dataclass(frozen=True)
class Composed:
    name: str
    ops: list[str]
    input_shape: Shape
    source: str
    seed: int = 0
    estimated_ms: float = 0.0  # the cost model's runtime on an H100-class GPU


def _numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def shapes_through(ops: list[Op], shape: Shape) -> list[Shape]:
    """The shape entering each op, then the output's."""
    shapes = [shape]
    for op in ops:
        shapes.append(op.apply(shapes[-1], random.Random(0), "").shape)
    return shapes


def estimated_ms(ops: list[Op], shape: Shape) -> float:
    """A roofline estimate of the eager chain on an H100-class GPU in fp32: each op the larger of its memory time
    (PASSES over the bigger of its input and output) and its compute time (matmuls, convolutions), plus a launch.

    >>> round(estimated_ms([BY_NAME["relu"]], (1 << 28, 1)), 2)  # 2 GiB read and written
    0.87
    """
    total, shapes = 0.0, shapes_through(ops, shape)
    for op, s_in, s_out in zip(ops, shapes, shapes[1:]):
        moved = PASSES.get(op.name, PASSES[op.kind]) * 4 * max(_numel(s_in), _numel(s_out))
        compute = 0.0
        if op.kind == "linear":
            compute = 2 * _numel(s_in) * s_out[-1] / MATMUL_FLOPS_PER_MS
        elif op.kind == "conv":
            compute = 2 * _numel(s_out) * s_in[1] * 9 / CONV_FLOPS_PER_MS
        total += max(moved / BYTES_PER_MS, compute) + LAUNCH_MS
    return total


def sized(ops: list[Op], shape: Shape, target_ms: float) -> Shape:
    """`shape` with its batch changed so that the chain's estimate is about `target_ms`, no activation over
    MAX_ELEMENTS (and a batch of 1 at least)."""
    per_sample = estimated_ms(ops, (1, *shape[1:])) - LAUNCH_MS * len(ops)
    biggest = max(_numel(s) for s in shapes_through(ops, (1, *shape[1:])))
    batch = (target_ms - LAUNCH_MS * len(ops)) / max(per_sample, 1e-12)
    return (max(1, min(int(batch), MAX_ELEMENTS // biggest)), *shape[1:])


def input_shape(rng: random.Random, rank: int, elements: int) -> Shape:
    """A shape of `rank` with about `elements` values, in sizes kernels meet (powers of two and a few others)."""
    if rank == 2:
        features = rng.choice([256, 512, 1024, 2048, 4096])
        return (max(2, elements // features), features)
    if rank == 3:
        hidden = rng.choice([64, 128, 256, 512, 768, 1024])
        seq = rng.choice([32, 64, 128, 256, 512])
        return (max(1, elements // (hidden * seq)), seq, hidden)
    channels = rng.choice([3, 8, 16, 32, 64])
    side = rng.choice([16, 32, 64, 128, 256])
    return (max(1, elements // (channels * side * side)), channels, side, side)


def chain(rng: random.Random, shape: Shape, length: int, first: Op | None = None) -> list[Op]:
    """`length` ops, each accepting the shape the one before it leaves (fewer when nothing fits)."""
    ops: list[Op] = []
    for i in range(length):
        fits = [op for op in OPS if op.accepts(shape)] if not (i == 0 and first) else [first]
        if not fits:
            break
        if ops:  # no op twice in a row (relu of relu is not a task)
            fits = [op for op in fits if op.name != ops[-1].name] or fits
        op = rng.choice(fits)
        shape = op.apply(shape, random.Random(0), "").shape
        ops.append(op)
    return ops


def render(name: str, ops: list[Op], shape: Shape, rng: random.Random, docstring: str) -> str:
    """The task file: module-level sizes, Model with the ops' parameters and forward chain, get_inputs."""
    init: list[str] = []
    forward: list[str] = []
    current = shape
    for i, op in enumerate(ops):
        applied = op.apply(current, rng, f"op{i}_" if len(ops) > 1 else "")
        init += applied.init
        forward.append(f"x = {applied.expr.format(x='x')}")
        current = applied.shape
    dims = ", ".join(str(d) for d in shape)
    constructor = ""
    if init:
        lines = "\n".join(f"        {line}" for line in init)
        constructor = f"    def __init__(self):\n        super().__init__()\n{lines}\n\n"
    body = "\n".join(f"        {line}" for line in forward)
    return f'''"""{docstring}"""

import torch
import torch.nn as nn
import torch.nn.functional as F

INPUT_SHAPE = ({dims},)


class Model(nn.Module):
{constructor}    def forward(self, x: torch.Tensor) -> torch.Tensor:
{body}
        return x


def get_inputs():
    return [torch.randn(*INPUT_SHAPE)]


def get_init_inputs():
    return []
'''


def compose(seed: int, scale: str = "cpu", max_ops: int = 5) -> Composed:
    """One fused task, a function of `seed` alone."""
    rng = random.Random(seed)
    lo, hi = SCALES[scale]
    elements = int(2 ** rng.uniform(lo.bit_length() - 1, hi.bit_length() - 1))
    rank = rng.choice([2, 3, 4])
    shape = input_shape(rng, rank, elements)
    ops = chain(rng, shape, rng.randint(1, max_ops))
    if scale in TARGET_MS:
        lo_ms, hi_ms = TARGET_MS[scale]
        shape = sized(ops, shape, 2 ** rng.uniform(math.log2(lo_ms), math.log2(hi_ms)))
    digest = hashlib.sha256(f"{seed}:{scale}:{[o.name for o in ops]}:{shape}".encode()).hexdigest()[:6]
    name = f"{'_'.join(o.name for o in ops)[:60]}_{digest}"
    doc = f"{' -> '.join(o.name for o in ops)} on a {'x'.join(map(str, shape))} input (composed from seed {seed})."
    source = render(name, ops, shape, rng, doc)
    return Composed(name, [o.name for o in ops], shape, source, seed, round(estimated_ms(ops, shape), 3))


def distinct(first_seed: int, count: int, scale: str = "cpu", max_ops: int = 5) -> list[Composed]:
    """`count` tasks with different chains of operators (the same chain at other sizes is a duplicate to the
    filters), from seeds first_seed, first_seed + 1, ...: a function of the arguments alone. At a scale with a
    target runtime, a chain too light to reach the target's low end within the memory cap is not drawn."""
    tasks, chains, seed = [], set(), first_seed
    floor_ms = TARGET_MS[scale][0] / 2 if scale in TARGET_MS else 0.0
    while len(tasks) < count and seed < first_seed + 100 * count:
        task = compose(seed, scale, max_ops)
        seed += 1
        if tuple(task.ops) not in chains and task.estimated_ms >= floor_ms:
            chains.add(tuple(task.ops))
            tasks.append(task)
    return tasks


def seed_task(op_name: str, scale: str = "cpu", seed: int = 0) -> Composed:
    """The seed task of one operator alone, on an input it takes."""
    op = BY_NAME[op_name]
    rng = random.Random(seed)
    lo, hi = SCALES[scale]
    elements = int((lo * hi) ** 0.5)
    for rank in sorted(op.ranks, key=lambda r: (r != 3, r)):
        shape = input_shape(rng, rank, elements)
        if op.accepts(shape):
            break
    doc = f"{op.name} ({op.kind}) on a {'x'.join(map(str, shape))} input: a seed operator."
    return Composed(op.name, [op.name], shape, render(op.name, [op], shape, rng, doc))
