"""Input distributions for the trials beyond the stock `get_inputs()` draws.

- stress: heavier tails, another scale, an offset, spikes, and a comb (alternate elements shifted, with a random
  phase, which a reduction over every k-th element cannot average away), keeping each input's sign structure and
  range ([0, 1] stays in [0, 1], non-negative stays non-negative), so the reference still computes the same
  function on a valid input while analytic shortcuts and subsampled reductions stop matching it;
- sparse mutation: a small block of each floating input changed, in the same buffers, so caches keyed on
  pointers or on sampled contents return stale answers.
Integer and boolean inputs (indices, masks) keep their values.
"""

from __future__ import annotations

import torch

from cudagent.trees import clone


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _scale(x: torch.Tensor) -> tuple[float, float]:
    xf = x.float()
    s = float(xf.std()) if x.numel() > 1 else 0.0
    return float(xf.mean()), (s if s > 0 else 1.0)


def _heavy_tailed(shape, gen: torch.Generator, device) -> torch.Tensor:
    """A normal times a log-normal: symmetric, unit-ish scale, with tails far heavier than a normal's."""
    z = torch.randn(shape, generator=gen, device=device)
    w = torch.randn(shape, generator=gen, device=device)
    return (z * torch.exp(0.75 * w)).clamp_(-30, 30)


def _comb(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """True at every other element of the flattened tensor, starting at a random phase."""
    phase = int(torch.randint(0, 2, (1,), generator=gen, device=x.device))
    index = torch.arange(x.numel(), device=x.device).reshape(x.shape)
    return (index % 2) == phase


def stress_inputs(inputs: list[torch.Tensor], seed: int, mild: bool = False) -> list[torch.Tensor]:
    out = []
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0:
            out.append(clone(x))
            continue
        gen = _generator(x.device, seed + i)
        mean, std = _scale(x)
        nonneg = bool((x >= 0).all())
        unit = nonneg and bool((x <= 1).all())
        u = torch.rand((2,), generator=gen, device=x.device).tolist()
        a, b = 1.5 + 1.5 * u[0], 2 * u[1] - 1
        if mild:
            a, b = 1.5, 0.0
            t = torch.randn(x.shape, generator=gen, device=x.device)
        else:
            t = _heavy_tailed(x.shape, gen, x.device)
        comb = _comb(x, gen) if not mild else torch.zeros(x.shape, dtype=torch.bool, device=x.device)
        if unit:
            r = torch.rand(x.shape, generator=gen, device=x.device)
            y = torch.where(comb, r**0.25, r**4)
        elif nonneg:
            y = std * (a * t).abs() * torch.where(comb, 3.0, 1.0) + 1e-3 * std
        else:
            y = mean + std * (a * t + b + torch.where(comb, 2.0, 0.0))
        if not mild and x.numel() >= 16:
            spikes = torch.rand(x.shape, generator=gen, device=x.device) < 1e-3
            if unit:
                y = torch.where(spikes, torch.ones_like(y), y)
            else:
                sign = (
                    1.0 if nonneg else torch.where(torch.rand(x.shape, generator=gen, device=x.device) < 0.5, -1.0, 1.0)
                )
                y = torch.where(spikes, mean + sign * 10 * std, y)
        out.append(y.to(x.dtype))
    return out


def sparse_mutation(inputs: list[torch.Tensor], seed: int) -> tuple[list[torch.Tensor], bool]:
    """A copy of the inputs with one small block of each floating input redrawn; (inputs, whether anything changed)."""
    out, changed = [], False
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            out.append(x)
            continue
        y = x.contiguous().clone()
        if x.is_floating_point() and x.numel() > 0:
            gen = _generator(x.device, seed + i)
            flat = y.view(-1)
            n = max(1, flat.numel() // 1000)
            start = int(torch.randint(0, flat.numel() - n + 1, (1,), generator=gen, device=x.device))
            mean, std = _scale(x)
            nonneg = bool((x >= 0).all())
            unit = nonneg and bool((x <= 1).all())
            if unit:
                block = torch.rand((n,), generator=gen, device=x.device)
            else:
                block = mean + 4 * std * torch.randn((n,), generator=gen, device=x.device)
                block = block.abs() if nonneg else block
            flat[start : start + n] = block.to(x.dtype)
            changed = True
        out.append(y)
    return out, changed
