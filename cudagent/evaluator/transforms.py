"""Secret changes of scale and offset that keep each input valid: the distribution a candidate cannot recognise.

A candidate can tell the task's stock inputs apart from anything else (their mean, their spread, their range) and
behave well only on what it does not recognise, or memoise what it has seen before. So inputs are also used under
a transform it cannot predict, which keeps each input's kind:

    unit    (values in [0, 1])   x ** g            g = exp(u), u in [-0.4, 0.4]
    nonneg  (values >= 0)        a * x             a = exp(u), u in [-0.5, 0.5]
    signed                       a * x + b * std   a as above, b in [-0.5, 0.5]
    fixed   (integers, booleans) unchanged

Both sides of the trust boundary use this module: the parent draws the parameters (from `secrets`, or from a
seeded stream it can replay) and computes the reference on the same transformed inputs; the child applies the
timing loop's per-sample transforms to its pristine input sets.

>>> import torch
>>> spec = InputSpec.of([torch.rand(8), torch.arange(4), torch.randn(8)])
>>> [k.kind for k in spec.inputs]
['unit', 'fixed', 'signed']
>>> draws = ParamStream(7).next(3)
>>> out = spec.apply([torch.rand(8), torch.arange(4), torch.randn(8)], draws)
>>> bool(((out[0] >= 0) & (out[0] <= 1)).all()), out[1].tolist()
(True, [0, 1, 2, 3])
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class InputKind:
    kind: str  # unit, nonneg, signed or fixed
    std: float = 1.0

    def to_dict(self) -> dict:
        return {"kind": self.kind, "std": self.std}


@dataclass(frozen=True)
class InputSpec:
    """The kind of each input of one input set, read from its contents."""

    inputs: tuple[InputKind, ...]

    @classmethod
    def of(cls, inputs: list) -> InputSpec:
        kinds = []
        for x in inputs:
            if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0:
                kinds.append(InputKind("fixed"))
                continue
            xf = x.float()
            nonneg = bool((xf >= 0).all())
            std = float(xf.std()) if x.numel() > 1 else 1.0
            std = std if math.isfinite(std) and std > 0 else 1.0
            kinds.append(
                InputKind("unit" if nonneg and bool((xf <= 1).all()) else "nonneg" if nonneg else "signed", std)
            )
        return cls(tuple(kinds))

    def to_list(self) -> list[dict]:
        return [k.to_dict() for k in self.inputs]

    @classmethod
    def from_list(cls, items: list[dict]) -> InputSpec:
        return cls(tuple(InputKind(d["kind"], float(d["std"])) for d in items))

    def apply(self, inputs: list, draws: list[tuple[float, float]], out: list | None = None) -> list:
        """The inputs transformed by one draw (two uniforms in [0, 1) per input); into `out`'s buffers if given."""
        result = []
        for i, (x, kind) in enumerate(zip(inputs, self.inputs)):
            u1, u2 = draws[i]
            target = out[i] if out is not None else None
            if not isinstance(x, torch.Tensor):  # a Python value: passed as it is, every call
                result.append(x)
                continue
            if kind.kind == "fixed":
                if target is not None and target is not x:
                    target.copy_(x)
                result.append(target if target is not None else x.clone())
                continue
            if kind.kind == "unit":
                y = (
                    torch.pow(x, math.exp(0.8 * u1 - 0.4), out=target)
                    if target is not None
                    else x.pow(math.exp(0.8 * u1 - 0.4))
                )
            else:
                a = math.exp(u1 - 0.5)
                y = torch.mul(x, a, out=target) if target is not None else x.mul(a)
                if kind.kind == "signed":
                    y.add_((u2 - 0.5) * kind.std)
            result.append(y)
        return result


class ParamStream:
    """Draws for successive calls from a seed, so that the parent can replay the draw of any call."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def next(self, n_inputs: int) -> list[tuple[float, float]]:
        return [(self.rng.random(), self.rng.random()) for _ in range(n_inputs)]


def secret_draw(n_inputs: int) -> list[tuple[float, float]]:
    """One draw from the operating system's randomness (nothing to replay)."""
    import secrets

    return [(secrets.randbelow(1 << 30) / (1 << 30), secrets.randbelow(1 << 30) / (1 << 30)) for _ in range(n_inputs)]
