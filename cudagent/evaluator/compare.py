"""Comparing a candidate's outputs with the reference's, in the trusted parent.

Exact type, structure, shape, dtype and device; NaN is never a wildcard (the candidate must be finite wherever
the reference is, and non-finite exactly where it is not); values within atol + rtol * |expected|, with defaults
that depend on the output dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from cudagent.evaluator.verdict import Violation
from cudagent.evaluator.wire import Unsupported, WireTensor

# (atol, rtol) by output dtype. 1e-2 is the CUDA Agent / KernelBench policy; half precisions get what one
# rounding of their mantissa already costs.
DEFAULT_TOLERANCE: dict[torch.dtype, float] = {
    torch.float64: 1e-2,
    torch.float32: 1e-2,
    torch.float16: 1e-2,
    torch.bfloat16: 2e-2,
}
FP8_TOLERANCE = 1.25e-1
HALF = (torch.bfloat16, torch.float16)  # the dtypes whose reference may be farther from the answer (exact.py)


@dataclass(frozen=True)
class Tolerance:
    atol: float | None = None  # None: by dtype
    rtol: float | None = None

    def for_dtype(self, dtype: torch.dtype) -> tuple[float, float]:
        base = DEFAULT_TOLERANCE.get(dtype, FP8_TOLERANCE if "float8" in str(dtype) else 1e-2)
        return (self.atol if self.atol is not None else base, self.rtol if self.rtol is not None else base)


@dataclass
class Comparison:
    violations: list[Violation] = field(default_factory=list)
    max_abs_error: float = 0.0
    worst_tolerance_ratio: float = 0.0
    # squared error and squared reference norm over float outputs, for the relative L2 error
    err_sq: float = 0.0
    ref_sq: float = 0.0
    against_answer: bool = False  # judged against the fp32 answer a half-precision reference approximates (exact.py)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def rel_l2(self) -> float:
        return (self.err_sq / self.ref_sq) ** 0.5 if self.ref_sq > 0 else 0.0


def compare(expected, got, tol: Tolerance, name: str = "output", check_device: bool = True) -> Comparison:
    """Compare `got` with `expected`. check_device=False compares values only (two outputs both already judged)."""
    result = Comparison()
    _compare(expected, got, tol, name, result, check_device)
    return result


def _compare(expected, got, tol: Tolerance, name: str, r: Comparison, check_device: bool = True) -> None:
    if isinstance(expected, torch.Tensor):
        _compare_tensor(expected, got, tol, name, r, check_device)
        return
    if isinstance(expected, (list, tuple)):
        if type(got) is not type(expected):
            r.violations.append(
                Violation("OUTPUT_TYPE", f"{name} is {_kind(got)}; the reference returns {_kind(expected)}")
            )
            return
        if len(got) != len(expected):
            r.violations.append(
                Violation("OUTPUT_TYPE", f"{name} has {len(got)} items; the reference has {len(expected)}")
            )
            return
        for i, (e, g) in enumerate(zip(expected, got)):
            _compare(e, g, tol, f"{name}[{i}]", r, check_device)
        return
    if isinstance(expected, Mapping):  # a model's dict-like output (transformers' ModelOutput): same keys, in order
        if type(got) is not type(expected):
            r.violations.append(
                Violation("OUTPUT_TYPE", f"{name} is {_kind(got)}; the reference returns {_kind(expected)}")
            )
            return
        if list(got.keys()) != list(expected.keys()):
            r.violations.append(
                Violation(
                    "OUTPUT_TYPE", f"{name} has keys {list(got.keys())}; the reference has {list(expected.keys())}"
                )
            )
            return
        for key, e in expected.items():
            _compare(e, got[key], tol, f"{name}[{key!r}]", r, check_device)
        return
    if type(got) is not type(expected) or got != expected:
        r.violations.append(Violation("OUTPUT_TYPE", f"{name} is {got!r}; the reference returns {expected!r}"))


def _kind(x) -> str:
    if isinstance(x, WireTensor):
        return f"a {x.cls} (a tensor subclass)"
    if isinstance(x, Unsupported):
        return f"a {x.type_name}"
    if isinstance(x, torch.Tensor):
        return "a tensor"
    return f"a {type(x).__name__}"


def _compare_tensor(expected: torch.Tensor, got, tol: Tolerance, name: str, r: Comparison, check_device: bool) -> None:
    if type(got) is not torch.Tensor:
        r.violations.append(Violation("OUTPUT_TYPE", f"{name} is {_kind(got)}; the reference returns a torch.Tensor"))
        return
    if tuple(got.shape) != tuple(expected.shape):
        r.violations.append(
            Violation("OUTPUT_SHAPE", f"{name} has shape {list(got.shape)}; expected {list(expected.shape)}")
        )
        return
    if got.dtype != expected.dtype:
        r.violations.append(Violation("OUTPUT_DTYPE", f"{name} has dtype {got.dtype}; expected {expected.dtype}"))
        return
    device = getattr(got, "wire_device", str(got.device))
    if check_device and torch.device(device).type != expected.device.type:
        r.violations.append(Violation("OUTPUT_DEVICE", f"{name} is on {device}; expected {expected.device.type}"))
        return
    if expected.numel() == 0:
        return
    g = got.to(expected.device)
    if expected.is_complex():
        _compare_values(torch.view_as_real(expected), torch.view_as_real(g), tol, name, r, expected.dtype)
    elif expected.is_floating_point():
        _compare_values(expected, g, tol, name, r, expected.dtype)
    elif not torch.equal(expected, g):
        diff = (expected != g).nonzero()
        idx = tuple(diff[0].tolist())
        r.violations.append(
            Violation(
                "OUTPUT_MISMATCH",
                f"{name}: {diff.shape[0]} of {expected.numel()} values differ "
                f"(exact match required for {expected.dtype}); "
                f"first at index {idx}: got {g[idx].item()}, expected {expected[idx].item()}",
            )
        )


def _compare_values(e: torch.Tensor, g: torch.Tensor, tol: Tolerance, name: str, r: Comparison, dtype) -> None:
    atol, rtol = tol.for_dtype(dtype)
    work = torch.float64 if e.dtype == torch.float64 else torch.float32
    e, g = e.to(work), g.to(work)
    diff = torch.sub(g, e).abs_()
    allowed = e.abs().mul_(rtol).add_(atol)
    # the common case, all finite and all close, in few passes over the outputs (every trial's and every checked
    # timed call's outputs come here): the largest ratio is at most 1, and a NaN anywhere makes the largest NaN
    worst = float(torch.div(diff, allowed).max())
    if worst <= 1.0:
        r.max_abs_error = max(r.max_abs_error, float(diff.max()))
        r.worst_tolerance_ratio = max(r.worst_tolerance_ratio, worst)
        r.err_sq += float(torch.linalg.vector_norm(diff)) ** 2
        r.ref_sq += float(torch.linalg.vector_norm(e)) ** 2
        return
    e_fin, g_fin = torch.isfinite(e), torch.isfinite(g)
    # NaN is never a wildcard: finite where the reference is finite, and the same non-finite values elsewhere.
    bad_nonfinite = (e_fin & ~g_fin) | (~e_fin & ~((torch.isnan(e) & torch.isnan(g)) | (e == g)))
    n_bad_nf = int(bad_nonfinite.sum())
    if n_bad_nf:
        idx = _index(bad_nonfinite, e.shape)
        r.violations.append(
            Violation(
                "OUTPUT_NOT_FINITE",
                f"{name}: {n_bad_nf} of {e.numel()} values are NaN/Inf where the reference is not (or differ where "
                "it is "
                f"not finite); first at index {idx}: got {g[idx].item()}, expected {e[idx].item()}. Memory that is "
                "allocated but never written reads as NaN here: every output element must be written.",
            )
        )
    both = e_fin & g_fin
    err = torch.where(both, diff, 0.0)
    ratio = torch.where(both, diff / allowed, 0.0)
    _tally(r, err, torch.where(both, e, 0.0), ratio)
    n_bad = int((ratio > 1).sum())
    if n_bad:
        worst = _index(ratio == ratio.max(), e.shape)
        r.violations.append(
            Violation(
                "OUTPUT_MISMATCH",
                f"{name}: {n_bad} of {e.numel()} values differ beyond atol={atol:g} rtol={rtol:g}; the largest error "
                f"{float(err[worst]):.4g} is at index {worst}: got {g[worst].item():.6g}, "
                f"expected {e[worst].item():.6g}",
            )
        )


def _tally(r: Comparison, err: torch.Tensor, ref: torch.Tensor, ratio: torch.Tensor) -> None:
    """Add one tensor's errors (finite ones; the rest zeroed) and tolerance ratios to the comparison's figures."""
    r.max_abs_error = max(r.max_abs_error, float(err.max()))
    r.worst_tolerance_ratio = max(r.worst_tolerance_ratio, float(ratio.max()))
    r.err_sq += float(err.square().sum())
    r.ref_sq += float(ref.square().sum())


def _index(mask: torch.Tensor, shape) -> tuple:
    flat = int(mask.reshape(-1).nonzero()[0])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(shape))) if len(shape) else ()


def within_reference_error(expected, exact, got, tol: Tolerance, name: str = "output") -> Comparison:
    """`got` against `exact` (the answer a half-precision `expected` approximates, evaluator/exact.py), each element
    allowed the reference's own distance from it plus the dtype's tolerance, |got - exact| <= atol + rtol * |exact| +
    |expected - exact|, or passing as the plain rule passes it, |got - expected| <= atol + rtol * |expected|. The
    second keeps the widening a widening: where the reference lands far from the answer (a sharp softmax that picks
    another key once its logits are rounded), a candidate that agrees with the reference but for its own last rounding
    at the reference's magnitude is not failed by a tolerance taken at the answer's. For outputs whose structure,
    shapes and dtypes already matched `expected`; outputs that are not half precision are compared with `expected` as
    before. Errors are reported against `exact`."""
    from cudagent.trees import tensors

    result = Comparison()
    triples = list(zip(tensors(expected), tensors(exact), tensors(got)))
    for i, (e, x, g) in enumerate(triples):
        where = name if len(triples) == 1 else f"{name}[{i}]"
        if e.dtype not in HALF or x.shape != e.shape:
            _compare_tensor(e, g, tol, where, result, check_device=False)
            continue
        if e.numel() == 0:
            continue
        atol, rtol = tol.for_dtype(e.dtype)
        x, e, g = x.float(), e.to(x.device).float(), g.to(x.device).float()
        own = (e - x).abs()
        diff = (g - x).abs()
        allowed = x.abs().mul(rtol).add_(atol).add_(own)
        plain = (g - e).abs_().div_(e.abs().mul(rtol).add_(atol))  # the plain rule's ratio, element by element
        ratio = torch.minimum(diff / allowed, plain).nan_to_num(nan=float("inf"))  # a non-finite answer fails...
        same_nonfinite = ~torch.isfinite(e) & ((torch.isnan(e) & torch.isnan(g)) | (e == g))  # ...unless as expected
        ratio = torch.where(same_nonfinite, 0.0, ratio)
        _tally(result, torch.where(torch.isfinite(diff), diff, 0.0), torch.where(torch.isfinite(x), x, 0.0), ratio)
        n_bad = int((ratio > 1).sum())
        if n_bad:
            worst = _index(ratio == ratio.max(), e.shape)
            result.violations.append(
                Violation(
                    "OUTPUT_MISMATCH",
                    f"{where}: {n_bad} of {e.numel()} values are farther from the fp32 answer than the {e.dtype} "
                    f"reference is, beyond atol={atol:g} rtol={rtol:g}; at index {worst}: got {g[worst].item():.6g}, "
                    f"the answer {x[worst].item():.6g}, the reference {e[worst].item():.6g}",
                )
            )
    return result
