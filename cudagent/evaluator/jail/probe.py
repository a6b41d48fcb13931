"""The trusted probe behind the jail's level: a throwaway process enters the jail exactly as a candidate's would and
says what held.

    python -s -m cudagent.evaluator.jail.probe TREE CONFINE DEVICE      (prints one JSON object)

TREE is keeper.py's (namespace, subreaper), CONFINE the inner layer's level (strict, best-effort, off), DEVICE cpu
or cuda: on cuda the process then starts the CUDA driver (cuInit and a device count through libcuda itself, no
torch: a second, not the many of `import torch`), since a jail that CUDA cannot start in is no jail for a GPU's
candidates. Run by level.py under bubblewrap or without it; nothing of a candidate's is anywhere near.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

import cudagent.evaluator.jail.confine as confine
import cudagent.evaluator.jail.keeper as keeper
import cudagent.evaluator.jail.privileges as privileges
from cudagent.text import counted


def cuda_starts() -> str | None:
    """None when the CUDA driver starts and sees a device; else why not."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return f"libcuda.so.1 could not be loaded ({exc})"
    result = cuda.cuInit(0)
    if result != 0:
        return f"cuInit failed with CUDA error {result}"
    count = ctypes.c_int(0)
    result = cuda.cuDeviceGetCount(ctypes.byref(count))
    if result != 0 or count.value < 1:
        return f"cuDeviceGetCount gave error {result}, {counted(count.value, 'device')}"
    return None


def main(argv: list[str]) -> None:
    tree, level, device = argv
    try:
        keeper.keep(tree)
    except keeper.JailFailed as exc:
        print(json.dumps({"ok": False, "why": str(exc)}), flush=True)
        os._exit(0)
    report: dict = {"ok": True, "pid": os.getpid(), "processes": sorted(p for p in os.listdir("/proc") if p.isdigit())}
    privileges.drop_privileges()
    try:
        report["confinement"] = confine.enter(confine.Plan(level))
    except confine.Unconfined as exc:
        report.update(ok=False, why=f"the inner layer does not hold: {exc}")
    if report["ok"] and device == "cuda":
        why = cuda_starts()
        if why:
            report.update(ok=False, why=f"CUDA does not start in the jail: {why}")
    print(json.dumps(report), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
