"""Helpers over what forward returns and takes: a tensor, or lists and tuples of them (nested), and, among inputs,
the Python values KernelBench passes as they are (numbers, None, strings, dtypes).

>>> import torch
>>> out = (torch.zeros(2, dtype=torch.float32), [torch.ones(3, dtype=torch.int64)])
>>> nbytes_list(out), nbytes(out), has_dtype(out, torch.int64), all_finite(out)
([8, 24], 32, True, True)
"""

from __future__ import annotations

from collections.abc import Iterator


def tensors(obj) -> Iterator:
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from tensors(item)


def nbytes_list(obj) -> list[int]:
    return [t.numel() * t.element_size() for t in tensors(obj)]


def nbytes(obj) -> int:
    return sum(nbytes_list(obj))


def has_dtype(obj, dtype) -> bool:
    return any(t.dtype == dtype for t in tensors(obj))


def all_finite(obj) -> bool:
    import torch

    return all(bool(torch.isfinite(t).all()) for t in tensors(obj) if t.is_floating_point())


def to_device(obj, device):
    """`obj` with every tensor in it on `device`; other values as they are."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(x, device) for x in obj)
    return obj


def clone(obj):
    """A copy of `obj` that no call can change: tensors cloned, lists and tuples copied, other values shared (they
    are immutable)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(clone(x) for x in obj)
    return obj
