"""The device's measured ceilings (roofline.Peaks): memory bandwidth and matrix-product rates.

Datasheet numbers are leads; these are measured once per device in a clean child process (peak_rates.py, the
child's side) and cached here, in the parent, and the physical floor and the roofline percentages are computed
against them.
"""

from __future__ import annotations

import hashlib
import json
import os

from cudagent.device.info import DeviceInfo
from cudagent.evaluator.timing.roofline import Peaks
from cudagent.resources import cache_dir

PEAKS_VERSION = "1"


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
