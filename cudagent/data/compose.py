"""Tasks from seed operators: one op alone (a seed task), or a chain of 1-5 whose shapes fit (a fused task), drawn
reproducibly from a seed number, rendered as a KernelBench-style task file.

Sizes are drawn so that the activation holds about `elements` values (a range per scale: small for the CPU, large
for the paper's 1-100 ms window on a GPU); the runtime filter then decides.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from cudagent.data.ops import BY_NAME, OPS, Op, Shape

# elements of the input activation, per scale: (low, high), drawn log-uniformly
# (the GPU's: an elementwise pass over 2^24 fp32 values takes ~0.05 ms on an H100, so chains need 2^24-2^28 to land
# in the paper's 1-100 ms window)
SCALES = {"cpu": (1 << 14, 1 << 18), "gpu": (1 << 24, 1 << 28)}


@dataclass(frozen=True)
class Composed:
    name: str
    ops: list[str]
    input_shape: Shape
    source: str
    seed: int = 0


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
    digest = hashlib.sha256(f"{seed}:{scale}:{[o.name for o in ops]}:{shape}".encode()).hexdigest()[:6]
    name = f"{'_'.join(o.name for o in ops)[:60]}_{digest}"
    doc = f"{' -> '.join(o.name for o in ops)} on a {'x'.join(map(str, shape))} input (composed from seed {seed})."
    return Composed(name, [o.name for o in ops], shape, render(name, ops, shape, rng, doc), seed)


def distinct(first_seed: int, count: int, scale: str = "cpu", max_ops: int = 5) -> list[Composed]:
    """`count` tasks with different chains of operators (the same chain at other sizes is a duplicate to the
    filters), from seeds first_seed, first_seed + 1, ...: a function of the arguments alone."""
    tasks, chains, seed = [], set(), first_seed
    while len(tasks) < count and seed < first_seed + 100 * count:
        task = compose(seed, scale, max_ops)
        seed += 1
        if tuple(task.ops) not in chains:
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
