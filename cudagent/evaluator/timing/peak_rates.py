"""Measuring the device's ceilings. Runs in a clean child process (child.py, op `peaks`); the parent caches the
result (peaks.py)."""

from __future__ import annotations


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
