"""Benchmark: nvcc as it comes, or with `--threads 2` (what cudagent's builds pass: the host and the device
preprocessing run side by side; cudafe++ and cicc stay one after the other), on the two kinds of CUDA unit
cudagent compiles:

    python benchmarks/nvcc_threads.py [--runs 3] [--arch sm_90] [--out FILE.json]

- `load_inline`: a KernelBench candidate's CUDA source (the "add" example of KernelBench's prompts, carried in
  .carry/kb-fewshot), which includes torch/extension.h, with the flags torch's load_inline gives nvcc;
- `workspace`: softmax.cu of the CUDA example solution, with the flags of cudagent's build.ninja (it includes no
  torch header).

The two settings alternate within each run, so that a change in the machine's load falls on both. Needs nvcc
(CUDA_HOME, or on PATH) and torch's headers; no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from run_summary import write_run_summary  # noqa: E402

TORCH_NVCC = [
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
]


def _nvcc() -> str:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    found = os.path.join(home, "bin", "nvcc") if home else shutil.which("nvcc")
    if not found or not os.path.exists(found):
        sys.exit("nvcc was not found: set CUDA_HOME or put nvcc on PATH")
    return found


def _units(scratch: Path, arch: str) -> dict[str, list[str]]:
    from torch.utils import cpp_extension

    cuda_include = str(Path(_nvcc()).resolve().parent.parent / "include")
    includes = []
    for d in [*cpp_extension.include_paths(), cuda_include, sysconfig.get_path("include")]:
        includes += ["-isystem", d]
    gencode = f"-gencode=arch=compute_{arch[3:]},code={arch}"
    source = (ROOT / ".carry/kb-fewshot/add-model_new.py").read_text()
    inline = scratch / "cuda.cu"
    inline.write_text(source.split('source = """')[1].split('"""')[0])
    return {
        "load_inline": [
            "-DTORCH_EXTENSION_NAME=elementwise_add",
            "-DTORCH_API_INCLUDE_EXTENSION_H",
            *includes,
            *TORCH_NVCC,
            gencode,
            "--compiler-options",
            "-fPIC",
            "-std=c++17",
            "-c",
            str(inline),
        ],
        "workspace": [
            *includes,
            *TORCH_NVCC,
            gencode,
            "--compiler-options",
            "-fPIC",
            "-O3",
            "--use_fast_math",
            "-lineinfo",
            "-std=c++20",
            "-c",
            str(ROOT / "examples/solutions/cuda/softmax/kernels/softmax.cu"),
        ],
    }


def _timed(argv: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True)
    return round(time.monotonic() - start, 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "nvcc_threads.json"))
    args = parser.parse_args()
    nvcc = _nvcc()
    runs = []
    with tempfile.TemporaryDirectory(prefix="nvcc-threads-") as tmp:
        units = _units(Path(tmp), args.arch)
        for _ in range(args.runs):
            run = {}
            for name, argv in units.items():
                base = [nvcc, *argv, "-o", os.path.join(tmp, f"{name}.o")]
                run[f"{name}_serial_s"] = _timed(base)
                run[f"{name}_threads2_s"] = _timed([*base, "--threads", "2"])
            runs.append(run)
            print(json.dumps(run), flush=True)
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    write_run_summary(args.out, runs, __doc__.strip().splitlines()[0], nvcc=version)


if __name__ == "__main__":
    main()
