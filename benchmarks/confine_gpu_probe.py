"""Which files the CUDA stack needs that confinement does not grant: a diagnostic run on a GPU machine.

A throwaway process confines itself exactly as a candidate's does (cudagent/evaluator/jail/confine.py, level strict, a
scratch directory as cwd and a build directory writable), then walks the CUDA stack one step at a time: import torch,
start CUDA, cuBLAS, NVML (free memory), CUPTI (torch.profiler with CUDA activity), and nvcc compiling and
linking a kernel. A small LD_PRELOAD library logs every file call that fails with EACCES or EPERM (what Landlock
and seccomp answer), from the process and from everything it starts (nvcc, cicc, ptxas, the host compiler). The
same walk with `--confine off` is the control: a path denied there is denied by the machine, not by us.

    python benchmarks/confine_gpu_probe.py [--out FILE.json]

Output: per level, each step's result and the denied calls (operation, path, errno, program).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SHIM = Path(__file__).with_name("confine_gpu_probe_shim.c")  # the LD_PRELOAD library


WALK = r"""
import json, os, sys, time, subprocess, traceback
import cudagent.evaluator.jail.privileges as isolation, cudagent.evaluator.jail.confine as confine
level, build = sys.argv[1], sys.argv[2]
isolation.drop_privileges()
steps = []
# the product's levels, and partial ones that tell which mechanism or which missing grant stops CUDA
WIDER = {"landlock+dev": ["/dev"], "landlock+proc": ["/proc"], "landlock+tmp+run": ["/tmp", "/dev/shm", "/run", "/var"],
         "landlock+all": ["/dev", "/proc", "/tmp", "/run", "/var"]}
if level.startswith("seccomp-refusing-"):  # the filter with this one refusal alone (socket families always)
    import errno
    name = level.removeprefix("seccomp-refusing-")
    confine.REFUSED = {name: {"connect": errno.ECONNREFUSED, "io_uring": errno.ENOSYS}.get(name, errno.EPERM)}
    level = "seccomp-only"
if level in ("strict", "off"):
    try:
        confine.enter(confine.Plan(level, write=[build]))
    except confine.Unconfined as e:
        print(json.dumps({"level": level, "refused": str(e), "steps": []})); sys.exit(0)
elif level == "seccomp-only":
    confine._seccomp(confine._libc(), [])
else:
    confine._landlock(confine._libc(), confine.Plan("strict", write=[build] + WIDER.get(level, [])), [])
short = level not in ("strict", "off") or sys.argv[1] != level

def step(name, fn):
    start = time.perf_counter()
    try:
        detail = fn()
        steps.append({"step": name, "ok": True, "detail": detail, "s": round(time.perf_counter() - start, 2)})
    except BaseException as e:
        steps.append({"step": name, "ok": False, "error": f"{type(e).__name__}: {e}"[:600],
                      "s": round(time.perf_counter() - start, 2)})

box = {}
def imp():
    import torch; box["torch"] = torch; return torch.__version__
def start():
    t = box["torch"]; t.cuda.init(); return t.cuda.get_device_name(0)
def blas():
    t = box["torch"]; a = t.randn(2048, 2048, device="cuda"); b = a @ a; t.cuda.synchronize(); return float(b.norm())
def nvml():
    t = box["torch"]; free, total = t.cuda.mem_get_info(); return {"free_gib": round(free / 2**30, 1),
        "utilization": t.cuda.utilization() if hasattr(t.cuda, "utilization") else None}
def cupti():
    t = box["torch"]
    from torch.profiler import profile, ProfilerActivity
    a = t.randn(1024, 1024, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        (a @ a).sum().item()
    kernels = [e for e in p.events() if e.device_type.name == "CUDA"]
    assert kernels, "CUPTI recorded no CUDA kernel"
    return len(kernels)
def nvcc():
    src = os.path.join(build, "k.cu")
    with open(src, "w") as f:
        f.write('__global__ void k(float* x){x[threadIdx.x]+=1;}\nint main(){float*x;cudaMalloc(&x,128);'
                'k<<<1,32>>>(x);return cudaDeviceSynchronize()!=cudaSuccess;}\n')
    exe = os.path.join(build, "k")
    cmd = ["nvcc", "-arch=sm_90", "-o", exe, src]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-800:]
    ran = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, f"the built program failed: {ran.returncode} {ran.stderr[-300:]}"
    return "built and ran"
def tcp():
    import socket
    try:
        socket.create_connection(("127.0.0.1", 22), timeout=2)
        return "connected"
    except OSError as e:
        return f"refused: {e}"
for name, fn in [("import torch", imp), ("cuda start", start), ("cublas", blas), ("nvml", nvml),
                 ("cupti", cupti), ("nvcc", nvcc), ("tcp", tcp)]:
    if short and name not in ("import torch", "cuda start", "cublas"):
        continue
    step(name, fn)
    if name == "import torch" and not steps[-1]["ok"]:
        break
print(json.dumps({"level": sys.argv[1], "status": confine.status(), "steps": steps}))
"""


def walk(level: str, shim: Path, scratch: Path) -> dict:
    build = scratch / f"build-{level}"
    home = scratch / f"home-{level}"
    build.mkdir()
    home.mkdir()
    log = build / "denied.tsv"
    preload = build / "shim.so"  # inside a writable grant, so that the programs the walk starts can load it too
    shutil.copy2(shim, preload)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),  # as the evaluator's child has it (cudagent/evaluator/jail/process.py)
        "HOME": str(home),
        "TMPDIR": str(home),
        "LD_PRELOAD": str(preload),
        "PROBE_DENIED_LOG": str(log),
    }
    done = subprocess.run(
        [sys.executable, "-s", "-c", WALK, level, str(build)],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
    )
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {"level": level, "crashed": done.returncode, "stderr": done.stderr[-3000:]}
    denied = []
    if log.exists():
        seen = set()
        for line in log.read_text(errors="replace").splitlines():
            if line not in seen:
                seen.add(line)
                program, op, why, path = (line.split("\t") + ["", "", "", ""])[:4]
                denied.append({"program": program, "op": op, "errno": why, "path": path})
    result["denied"] = denied
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--levels",
        default="strict,off",
        help="comma-separated: strict, off, seccomp-only, landlock-only, landlock+dev, landlock+proc, "
        "landlock+tmp+run, landlock+all, seccomp-refusing-{connect,bind,ptrace,process_vm,io_uring}",
    )
    args = parser.parse_args()
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        print("no C compiler here: the probe needs cc to build its LD_PRELOAD library", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="confine-gpu-probe-") as tmp:
        scratch = Path(tmp)
        shim = scratch / "shim.so"
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(shim), str(SHIM), "-ldl"], check=True)
        os.chmod(scratch, 0o755)
        levels = args.levels.split(",")
        results = [walk(level, shim, scratch) for level in levels]
    listing = subprocess.run(
        "ls -la /dev /dev/nvidia-caps /dev/shm /proc/driver/nvidia 2>&1", shell=True, capture_output=True, text=True
    ).stdout
    report = {
        "machine": platform.uname()._asdict(),
        "python": sys.version.split()[0],
        "walks": results,
        "listing": listing.splitlines(),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
