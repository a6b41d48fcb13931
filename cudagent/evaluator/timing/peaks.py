"""The device's measured ceilings: memory bandwidth and matrix-product rates.

Datasheet numbers are leads; these are measured once per device in a clean child process (peak_rates.py, the
child's side) and cached here, in the parent, and the physical floor and the roofline percentages are computed
against them.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass

from cudagent.device.info import DeviceInfo
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


def _cache_path(device: DeviceInfo) -> str:
    key = hashlib.sha256(f"{device.cache_key()}|{PEAKS_VERSION}".encode()).hexdigest()[:24]
    return os.path.join(cache_dir(), "peaks", f"{device.kind}-{key}.json")


def peaks_cached(device: DeviceInfo) -> bool:
    return os.path.isfile(_cache_path(device))


def device_peaks(device: DeviceInfo) -> Peaks:
    """The cached peaks of this device, measured now if they are not cached yet."""
    path = _cache_path(device)
    try:
        with open(path) as f:
            return Peaks(**json.load(f))
    except (OSError, ValueError, TypeError):
        pass
    from cudagent.evaluator.jail.process import ChildProcess

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
