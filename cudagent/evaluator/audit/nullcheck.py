"""Null candidates: outputs that owe nothing to the computation. A task on which one of them passes is degenerate
(its output is constant, tiny, or equal to an input), and a "solution" to it proves nothing (KernelBench has such tasks,
and a harness that does not check for them scores them).

    zeros        all zeros
    mean         the mean of the output on another input draw, everywhere
    passthrough  an input of the output's shape, returned as is
    subsample    one output element in a hundred, each repeated over its hundred neighbours

Each must pass on every one of three fresh draws to count. Runs in this (trusted) process: null candidates are ours.
"""

from __future__ import annotations

import secrets

import torch

from cudagent.device.info import release_cached_device_memory
from cudagent.evaluator.compare import Tolerance, compare
from cudagent.task import Task

DRAWS = 3


def null_candidates(task: Task, device: str, tol: Tolerance | None = None) -> list[str]:
    """The names of the null candidates that pass; empty for a sound task. The device memory the draws took is
    handed back afterwards: baseline workers and candidates start next, in processes of their own."""
    try:
        return _passing(task, device, tol or Tolerance())
    finally:
        release_cached_device_memory()


def _passing(task: Task, device: str, tol: Tolerance) -> list[str]:
    first = _draw(task, device)[1]
    if not isinstance(first, torch.Tensor) or not first.is_floating_point():
        return []
    other_mean = first.float().mean().item()
    del first
    alive = ["zeros", "mean", "passthrough", "subsample"]
    for _ in range(DRAWS):  # one draw at a time: KernelBench's inputs can take gigabytes each
        inputs, expected = _draw(task, device)
        for name in list(alive):
            got = _null(name, inputs, expected, other_mean)
            if got is None or not compare(expected, got, tol, check_device=False).ok:
                alive.remove(name)
            del got
        del inputs, expected
        if not alive:
            break
    return alive


def _draw(task: Task, device: str):
    model = task.build_model(secrets.randbits(62), device)
    inputs = task.make_inputs(secrets.randbits(62), device)
    return inputs, task.run(model, inputs)


def _null(name: str, inputs: list, expected: torch.Tensor, other_mean: float) -> torch.Tensor | None:
    if name == "zeros":
        return torch.zeros_like(expected)
    if name == "mean":
        return torch.full_like(expected, other_mean)
    if name == "passthrough":
        same = [
            x for x in inputs if isinstance(x, torch.Tensor) and x.shape == expected.shape and x.dtype == expected.dtype
        ]
        return same[0].clone() if same else None
    flat = expected.reshape(-1)
    index = torch.arange(flat.numel(), device=flat.device) // 100 * 100
    return flat[index].reshape(expected.shape)
