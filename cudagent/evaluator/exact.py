"""The answer a half-precision reference approximates: the same model and inputs carried in fp32.

A bf16 or fp16 reference rounds at every step, and on long reductions or stressed inputs it lands farther from the
true answer than the tolerance allows. A candidate that computes more exactly (an attention kernel keeping its
softmax in fp32) then misses the reference by more than the tolerance while being closer to the answer. Where a
half-precision output misses, the parent runs the reference once more with its half-precision parameters, buffers and
inputs carried in fp32 (TF32 off), and judges the candidate against that answer: an element passes when it is no
farther from it than the reference is, plus the dtype's tolerance, or where the plain rule passes it
(compare.within_reference_error). The candidate reaches neither run; a model that cannot run in fp32 (it casts or
builds half tensors itself) keeps the plain verdict.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import contextmanager

import torch

from cudagent.evaluator.compare import HALF, compare, within_reference_error


def has_half(obj) -> bool:
    from cudagent.trees import tensors

    return any(t.dtype in HALF for t in tensors(obj))


def carried_in_fp32(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` whose half-precision parameters and buffers are fp32 (other dtypes as they are)."""
    wide = copy.deepcopy(model)
    for tensor in [*wide.parameters(), *wide.buffers()]:
        if tensor.dtype in HALF:
            tensor.data = tensor.data.float()
    return wide


def widen(obj):
    """`obj` with each half-precision tensor in it as fp32; lists and tuples rebuilt, other values as they are."""
    if isinstance(obj, torch.Tensor):
        return obj.float() if obj.dtype in HALF else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(widen(x) for x in obj)
    return obj


@contextmanager
def _no_tf32():
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def exact_answer(task, model: torch.nn.Module, inputs: list):
    """The reference's output with its half precision carried in fp32, or None where the model will not run so (the
    plain verdict stands)."""
    try:
        with _no_tf32():
            return task.run(carried_in_fp32(model), widen(inputs))
    except Exception:  # noqa: BLE001  (a model that builds half tensors itself cannot be widened; nothing is lost)
        return None


def judged(expected, got, tol, answer: Callable[[], object | None]):
    """compare(expected, got, tol), except that a half-precision output missing only in its values is judged against
    `answer()` (exact_answer, computed only then) by compare.within_reference_error. The one comparison every check
    of a candidate's outputs against the reference's uses (the trials, the timed batches, the profiled calls)."""
    result = compare(expected, got, tol)
    if result.ok or not has_half(expected) or any(v.code != "OUTPUT_MISMATCH" for v in result.violations):
        return result
    exact = answer()
    if exact is None:
        return result
    widened = within_reference_error(expected, exact, got, tol)
    widened.against_answer = True
    return widened


def checksum_slack(expected, exact) -> list[float]:
    """Per output, what the reference's elements are off from the answer, summed: the allowance a batch's checksum
    gets beyond its elements' tolerance when it is checked against the answer (timing/parent_clock.sums_disagree)."""
    from cudagent.trees import tensors

    return [
        float((e.double() - x.to(e.device).double()).abs().nan_to_num().sum())
        for e, x in zip(tensors(expected), tensors(exact))
    ]
