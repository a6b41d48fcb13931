"""Seed operators: the torch building blocks tasks are made of, each with the input shapes it takes and the code it
contributes to a task's `Model`.

An op is applied to a tensor of a known shape and gives back the lines it adds to `__init__`, the expression it
adds to `forward` and the shape of its output, so ops can be chained (compose.py) into fused tasks whose every
shape is known before anything runs. Shapes follow torch's conventions: (batch, features), (batch, seq, hidden),
(batch, channels, height, width).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Applied:
    init: list[str]  # lines of __init__ (after super().__init__()), using `self.<attr>`
    expr: str  # the forward expression, over the input named by `{x}`
    shape: Shape  # the output's shape


@dataclass(frozen=True)
class Op:
    name: str
    kind: str  # elementwise, rowwise, reduction, norm, linear, conv, pool
    ranks: tuple[int, ...]  # input ranks it takes
    apply: Callable[[Shape, random.Random, str], Applied]  # (input shape, rng, attribute prefix) -> Applied

    def accepts(self, shape: Shape) -> bool:
        if len(shape) not in self.ranks:
            return False
        if self.name in _NEEDS_SPATIAL and min(shape[2:]) < 4:
            return False
        # an op across the last dimension needs one (after a reduction it has size 1: softmax of it is all ones)
        return self.kind == "elementwise" or len(shape) == 4 and self.kind in ("conv", "pool") or shape[-1] >= 8


_NEEDS_SPATIAL = {"max_pool2d", "avg_pool2d", "conv2d"}
ANY = (2, 3, 4)


def _unary(name: str, expr: str) -> Op:
    return Op(name, "elementwise", ANY, lambda s, rng, p: Applied([], expr, s))


def _with_params(name: str, make) -> Op:
    return Op(name, "elementwise", ANY, make)


def _scale_shift(s: Shape, rng: random.Random, p: str) -> Applied:
    n = s[-1] if len(s) != 4 else s[1]
    view = "" if len(s) != 4 else ".view(1, -1, 1, 1)"
    return Applied(
        [f"self.{p}scale = nn.Parameter(torch.randn({n}))", f"self.{p}shift = nn.Parameter(torch.randn({n}))"],
        f"{{x}} * self.{p}scale{view} + self.{p}shift{view}",
        s,
    )


def _linear(s: Shape, rng: random.Random, p: str) -> Applied:
    out = rng.choice([c for c in (64, 128, 256, 512, 1024) if c <= max(64, 2 * s[-1])])
    return Applied([f"self.{p}linear = nn.Linear({s[-1]}, {out})"], f"self.{p}linear({{x}})", (*s[:-1], out))


def _matmul(s: Shape, rng: random.Random, p: str) -> Applied:
    out = rng.choice([64, 128, 256, 512])
    return Applied(
        [f"self.{p}weight = nn.Parameter(torch.randn({s[-1]}, {out}) / {s[-1]} ** 0.5)"],
        f"torch.matmul({{x}}, self.{p}weight)",
        (*s[:-1], out),
    )


def _layer_norm(s: Shape, rng: random.Random, p: str) -> Applied:
    return Applied([f"self.{p}norm = nn.LayerNorm({s[-1]})"], f"self.{p}norm({{x}})", s)


def _rms_norm(s: Shape, rng: random.Random, p: str) -> Applied:
    return Applied(
        [f"self.{p}rms_weight = nn.Parameter(torch.ones({s[-1]}))"],
        f"{{x}} * torch.rsqrt({{x}}.pow(2).mean(-1, keepdim=True) + 1e-6) * self.{p}rms_weight",
        s,
    )


def _batch_norm(s: Shape, rng: random.Random, p: str) -> Applied:
    cls = "BatchNorm2d" if len(s) == 4 else "BatchNorm1d"
    return Applied([f"self.{p}bn = nn.{cls}({s[1]})"], f"self.{p}bn({{x}})", s)


def _group_norm(s: Shape, rng: random.Random, p: str) -> Applied:
    groups = max(g for g in (1, 2, 4, 8, 16, 32) if s[1] % g == 0)
    return Applied([f"self.{p}gn = nn.GroupNorm({groups}, {s[1]})"], f"self.{p}gn({{x}})", s)


def _conv2d(s: Shape, rng: random.Random, p: str) -> Applied:
    out = rng.choice([c for c in (8, 16, 32, 64) if c <= max(8, 2 * s[1])])  # the activation grows 2x at most
    k = rng.choice([1, 3, 5])
    return Applied(
        [f"self.{p}conv = nn.Conv2d({s[1]}, {out}, {k}, padding={k // 2})"], f"self.{p}conv({{x}})", (s[0], out, *s[2:])
    )


def _pool(kind: str):
    def apply(s: Shape, rng: random.Random, p: str) -> Applied:
        return Applied([], f"F.{kind}({{x}}, 2)", (s[0], s[1], s[2] // 2, s[3] // 2))

    return apply


def _reduce(name: str, expr: str) -> Op:
    return Op(name, "reduction", ANY, lambda s, rng, p: Applied([], expr, (*s[:-1], 1)))


def _rowwise(name: str, expr: str) -> Op:
    return Op(name, "rowwise", ANY, lambda s, rng, p: Applied([], expr, s))


OPS: list[Op] = [
    _unary("relu", "torch.relu({x})"),
    _unary("gelu", "F.gelu({x})"),
    _unary("silu", "F.silu({x})"),
    _unary("tanh", "torch.tanh({x})"),
    _unary("sigmoid", "torch.sigmoid({x})"),
    _unary("leaky_relu", "F.leaky_relu({x}, 0.1)"),
    _unary("hardtanh", "F.hardtanh({x}, -1.0, 1.0)"),
    _unary("softplus", "F.softplus({x})"),
    _unary("elu", "F.elu({x})"),
    _unary("mish", "F.mish({x})"),
    _unary("square", "{x} * {x}"),
    _unary("abs", "torch.abs({x})"),
    _unary("clamp", "torch.clamp({x}, -0.5, 0.5)"),
    _with_params("scale_shift", _scale_shift),
    _rowwise("softmax", "torch.softmax({x}, dim=-1)"),
    _rowwise("log_softmax", "torch.log_softmax({x}, dim=-1)"),
    _rowwise("cumsum", "torch.cumsum({x}, dim=-1)"),
    _reduce("sum", "{x}.sum(dim=-1, keepdim=True)"),
    _reduce("mean", "{x}.mean(dim=-1, keepdim=True)"),
    _reduce("amax", "{x}.amax(dim=-1, keepdim=True)"),
    _reduce("logsumexp", "torch.logsumexp({x}, dim=-1, keepdim=True)"),
    _reduce("norm", "torch.linalg.vector_norm({x}, dim=-1, keepdim=True)"),
    Op("layer_norm", "norm", ANY, _layer_norm),
    Op("rms_norm", "norm", ANY, _rms_norm),
    Op("batch_norm", "norm", (2, 4), _batch_norm),
    Op("group_norm", "norm", (4,), _group_norm),
    Op("linear", "linear", ANY, _linear),
    Op("matmul", "linear", (2, 3), _matmul),
    Op("conv2d", "conv", (4,), _conv2d),
    Op("max_pool2d", "pool", (4,), _pool("max_pool2d")),
    Op("avg_pool2d", "pool", (4,), _pool("avg_pool2d")),
]
BY_NAME = {op.name: op for op in OPS}
