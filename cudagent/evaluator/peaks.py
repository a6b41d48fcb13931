"""The device's measured ceilings: memory bandwidth and matrix-product rates.

Datasheet numbers are leads; these are measured once per device (in a clean child process) and cached, and the
physical floor and the roofline percentages are computed against them.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass

from cudagent.hardware import DeviceInfo
from cudagent.resources import cache_dir

PEAKS_VERSION = "1"


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


def device_peaks(device: DeviceInfo) -> Peaks:
    """The cached peaks of this device, measured now if they are not cached yet."""
    key = hashlib.sha256(f"{device.cache_key()}|{PEAKS_VERSION}".encode()).hexdigest()[:24]
    path = os.path.join(cache_dir(), "peaks", f"{device.kind}-{key}.json")
    try:
        with open(path) as f:
            return Peaks(**json.load(f))
    except (OSError, ValueError, TypeError):
        pass
    from cudagent.evaluator.session import ChildProcess

    with ChildProcess() as child:
        reply = child.request({"op": "peaks", "device": device.kind}, timeout_s=600, what="measuring the device")
    if not reply.get("ok", False):
        raise RuntimeError(f"measuring the device's peaks failed: {reply.get('error')}")
    peaks = Peaks(**reply["peaks"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(peaks.to_dict(), f)
    os.replace(tmp, path)
    return peaks


def measure_peaks(device) -> dict:
    """Runs in a child: median rates of repeated copies and matrix products on random data."""
    import torch

    cuda = device.type == "cuda"
    if cuda:
        copy_elems, n = 1 << 28, 8192  # 1 GiB copied; 8192^3 products
    else:
        copy_elems, n = 1 << 26, 1024
    bandwidth = _copy_rate(copy_elems, device, cuda)

    def gemm_rate(dtype, tf32: bool = False) -> float:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            return 2 * n**3 / _median_seconds(lambda: a @ b, cuda) / 1e12
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old

    return {
        "bandwidth_gbs": bandwidth,
        "fp32_tflops": gemm_rate(torch.float32),
        "tf32_tflops": gemm_rate(torch.float32, tf32=True) if cuda else None,
        "bf16_tflops": gemm_rate(torch.bfloat16) if cuda else None,
    }


def _copy_rate(elements: int, device, cuda: bool) -> float:
    """GB/s of a device-to-device copy, counting the bytes read and the bytes written."""
    import torch

    src = torch.randn(elements, device=device)
    dst = torch.empty_like(src)
    return 2 * elements * 4 / _median_seconds(lambda: dst.copy_(src), cuda) / 1e9


def _median_seconds(fn, cuda: bool, repeats: int = 10, warmup: int = 3) -> float:
    import time

    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]
