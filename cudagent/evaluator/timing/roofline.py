"""What a task must cost at least, and how close a time comes to it.

Bytes: every input, parameter and buffer read once and every output written once. FLOPs: matrix products and
convolutions counted by torch's FlopCounterMode, as the reference computes them. The physical floor of a time is
the bytes over the measured bandwidth: whatever the algorithm, what it reads and writes must move. The reference's
FLOPs are no floor: a better algorithm needs fewer (`diag(A) @ B` as a row scaling does N*M multiplies, not the
dense product's 2*N*N*M); they appear only in the achieved rates and the bound a time is judged against.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

from cudagent.trees import nbytes


@dataclass(frozen=True)
class Peaks:
    bandwidth_gbs: float  # device-to-device copy, bytes read plus bytes written, GB/s
    fp32_tflops: float  # float32 matrix product, no TF32
    tf32_tflops: float | None  # float32 matrix product with TF32 (CUDA only)
    bf16_tflops: float | None  # bfloat16 matrix product on tensor cores (CUDA only)

    @property
    def best_tflops(self) -> float:
        """The fastest arithmetic a candidate may legitimately use (reduced precision passes the tolerance)."""
        return max(x for x in (self.fp32_tflops, self.tf32_tflops, self.bf16_tflops) if x)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TaskCost:
    bytes: int
    flops: int

    def to_dict(self) -> dict:
        return asdict(self)


def task_cost(model, inputs: list, output) -> TaskCost:
    """Bytes and FLOPs of one forward call of the reference (counted by running it under a FLOP-counting mode)."""
    import torch

    total = nbytes(inputs) + nbytes(output) + nbytes(list(model.parameters())) + nbytes(list(model.buffers()))
    with torch.no_grad(), _flop_sum_mode()() as counter:
        model(*inputs)
    return TaskCost(bytes=int(total), flops=int(counter.total))


@functools.cache
def _flop_sum_mode():
    """The class of a dispatch mode that sums torch's own FLOP formulas (torch.utils.flop_counter's registry, the ones
    FlopCounterMode uses) over the operators a call runs. FlopCounterMode itself also tracks modules, and its mode's
    first call imports torch._dynamo to keep dynamo out of the mode's frames (~2 CPU-s in every evaluator's parent,
    which compiles nothing); this one tells dynamo there is nothing to skip, and imports nothing."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class FlopSum(TorchDispatchMode):
        total = 0

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = flop_registry.get(func._overloadpacket)
            if formula is not None:
                self.total += formula(*args, **kwargs, out_val=out)
            return out

    return FlopSum


def floor_ms(cost: TaskCost, peaks: Peaks) -> float:
    """The physical floor in milliseconds: the bytes that must move, over the measured bandwidth (never the
    reference's FLOPs, which a better algorithm need not perform).

    >>> floor_ms(TaskCost(bytes=3_000_000_000, flops=0), Peaks(3000.0, 50.0, None, None))
    1.0
    >>> floor_ms(TaskCost(bytes=3_000_000, flops=2 * 10**12), Peaks(3000.0, 50.0, 400.0, 800.0))
    0.001
    """
    return 1e3 * cost.bytes / (peaks.bandwidth_gbs * 1e9)


def achieved(cost: TaskCost, peaks: Peaks, ms: float) -> dict:
    """Achieved bandwidth and FLOP rate for a time, as numbers and as shares of the measured peaks.

    >>> r = achieved(TaskCost(bytes=1_500_000_000, flops=0), Peaks(3000.0, 50.0, None, None), 1.0)
    >>> r["bandwidth_gbs"], r["bandwidth_pct"]
    (1500.0, 50.0)
    """
    s = ms / 1e3
    out = {
        "bandwidth_gbs": cost.bytes / s / 1e9,
        "bandwidth_pct": 100 * cost.bytes / s / 1e9 / peaks.bandwidth_gbs,
        "tflops": cost.flops / s / 1e12,
    }
    out["fp32_pct"] = 100 * out["tflops"] / peaks.fp32_tflops
    if peaks.bf16_tflops:
        out["bf16_pct"] = 100 * out["tflops"] / peaks.bf16_tflops
    out["bound"] = (
        "memory" if cost.bytes / (peaks.bandwidth_gbs * 1e9) >= cost.flops / (peaks.best_tflops * 1e12) else "compute"
    )
    return out
