"""Faulty candidates for the fault-injection tests: each is a workspace (model_new.py and kernels) made from the
working axpby solution with one fault put into its forward function or its sources."""

from __future__ import annotations

import os
import re
from pathlib import Path

from cudagent.device.info import resolve_device
from cudagent.evaluator import EvalOptions, Evaluator
from cudagent.task import load_task
from cudagent.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tests" / "adversarial" / "tasks" / "vadd.py"  # alpha * a + b, 65536 floats
CPU_KERNEL = (REPO / "examples/solutions/cpu/axpby/kernels/axpby_cpu.cpp").read_text()
CPU_MODEL_NEW = (REPO / "examples/solutions/cpu/axpby/model_new.py").read_text()
CUDA_DIR = REPO / "examples/solutions/cuda/axpby"

# C++ statements run at the top of the forward function.
CPP_FAULTS = {
    "segfault": "{ volatile int* p = nullptr; *p = 1; }",
    "spin": "{ volatile bool go = true; while (go) {} }",
    "host_oom": "{ static std::vector<std::vector<char>> hog; for (;;) hog.emplace_back(size_t(64) << 20, 1); }",
    "print_flood": '{ for (int i = 0; i < 300000; ++i) printf("%0100d\\n", i); fflush(stdout); }',
}

# CUDA faults: kernels added to the .cu file, and statements run at the top of its host launcher.
CUDA_FAULT_KERNELS = """
__global__ void fault_illegal_address(float* p) { p[threadIdx.x + (1ll << 40)] = 1.0f; }
__global__ void fault_spin() { const long long start = clock64(); while (clock64() - start >= 0) {} }
"""
CUDA_FAULTS = {
    "illegal_address": "fault_illegal_address<<<1, 32, 0, stream>>>(out);",
    "gpu_spin": "fault_spin<<<1, 1, 0, stream>>>();",
    "gpu_oom": "for (;;) { void* p; if (cudaMalloc(&p, size_t(1) << 30) != cudaSuccess) return cudaGetLastError(); }",
    "segfault": "{ volatile int* p = nullptr; *p = 1; }",
}


def evaluator(device: str, **options) -> Evaluator:
    """An untimed Evaluator of the fault task on `device`; use it as a context manager."""
    return Evaluator(load_task(TASK), resolve_device(device), EvalOptions(timing=False, **options))


def good_cpu(ws: Workspace) -> None:
    (ws.kernels_dir / "axpby_cpu.cpp").write_text(CPU_KERNEL)
    ws.model_new_py.write_text(CPU_MODEL_NEW)


def faulty_cpu(ws: Workspace, fault: str) -> None:
    source = CPU_KERNEL.replace(
        "#include <torch/types.h>", "#include <torch/types.h>\n#include <cstdio>\n#include <vector>"
    )
    source = source.replace(
        "    auto out = torch::empty_like(a);", f"    {CPP_FAULTS[fault]}\n    auto out = torch::empty_like(a);"
    )
    (ws.kernels_dir / "axpby_cpu.cpp").write_text(source)
    ws.model_new_py.write_text(CPU_MODEL_NEW)


def good_cuda(ws: Workspace) -> None:
    for path in (CUDA_DIR / "kernels").iterdir():
        (ws.kernels_dir / path.name).write_text(path.read_text())
    ws.model_new_py.write_text((CUDA_DIR / "model_new.py").read_text())


def faulty_cuda(ws: Workspace, fault: str) -> None:
    good_cuda(ws)
    cu = ws.kernels_dir / "axpby.cu"
    source = cu.read_text()
    first_global = source.index("__global__")
    source = source[:first_global] + CUDA_FAULT_KERNELS.lstrip() + "\n" + source[first_global:]
    opening = re.search(r"extern \"C\" cudaError_t axpby_launch\([^)]*\) \{\n", source)
    assert opening, "the launcher of the axpby solution changed; update the fault injection"
    source = source[: opening.end()] + f"    {CUDA_FAULTS[fault]}\n" + source[opening.end() :]
    cu.write_text(source)


def compile_hang(ws: Workspace) -> None:
    """A source that includes a named pipe nobody writes: the compiler waits forever."""
    good_cpu(ws)
    os.mkfifo(ws.kernels_dir / "never_written.h")
    (ws.kernels_dir / "hang.cpp").write_text('#include "never_written.h"\nint hang_marker = 1;\n')


def compile_error_flood(ws: Workspace) -> None:
    """Ten thousand static_assert failures from one macro line: g++ prints about 360,000 lines in a second. (A
    hundred thousand distinct error lines in the source would take g++ minutes: it is quadratic in them.)"""
    good_cpu(ws)
    (ws.kernels_dir / "flood.cpp").write_text(
        "#define X10(a) a a a a a a a a a a\n"
        '#define ERR static_assert(sizeof(int) == 0, "flood");\n'
        "X10(X10(X10(X10(ERR))))\n"
    )
