"""The naive evaluation cycle, for comparison: what one iteration costs in the released CUDA Agent environment.

A reimplementation of that environment's protocol as its published layout describes it (not its code): every compile
wipes the build directory and rebuilds the extension from scratch with torch.utils.cpp_extension.load; verification is a
fresh process that builds both models, copies the weights and checks five random inputs; profiling is a fresh
process that compiles the reference with torch.compile and times candidate, eager and compiled (5 warm-up and 10
timed iterations under torch.profiler, summing kernel time) on every call.

    python benchmarks/naive_cycle.py WORKSPACE STEP     (STEP: compile, verify or profile)

Each step runs in the workspace directory, as the agent's shell commands would.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def compile_step(ws: Path) -> None:
    from torch.utils import cpp_extension

    build = ws / "build" / "naive"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    sources = [str(ws / "binding.cpp")] + sorted(
        str(p) for p in (ws / "kernels").glob("*") if p.suffix in (".cu", ".cpp")
    )
    cpp_extension.load(
        name="cuda_extension",
        sources=sources,
        build_directory=str(build),
        extra_include_paths=[str(ws)],
        verbose=False,
        with_cuda=True,
        extra_cflags=["-O3", "-std=c++20"],
        extra_cuda_cflags=["-O3", "--use_fast_math"],
    )


def _models(ws: Path):
    import torch

    sys.path[:0] = [str(ws), str(ws / "build" / "naive")]
    from model import Model, get_init_inputs, get_inputs
    from model_new import ModelNew

    init = get_init_inputs()
    ref = Model(*init).eval().cuda()
    new = ModelNew(*init).eval().cuda()
    new.load_state_dict(ref.state_dict())
    inputs = [x.cuda() for x in get_inputs()]
    return torch, ref, new, inputs, get_inputs


def verify_step(ws: Path) -> None:
    torch, ref, new, _, get_inputs = _models(ws)
    with torch.no_grad():
        for _ in range(5):
            inputs = [x.cuda() for x in get_inputs()]
            torch.testing.assert_close(new(*[x.clone() for x in inputs]), ref(*inputs), atol=1e-2, rtol=1e-2)
    torch.cuda.synchronize()


def profile_step(ws: Path) -> None:
    torch, ref, new, inputs, _ = _models(ws)
    compiled = torch.compile(ref)
    from torch.profiler import ProfilerActivity, profile

    def kernel_time(fn) -> float:
        with torch.no_grad():
            for _ in range(5):
                fn(*inputs)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                torch.cuda.synchronize()
                for _ in range(10):
                    fn(*inputs)
                torch.cuda.synchronize()
        return sum(e.device_time for e in prof.events() if e.device_type.name == "CUDA") / 10

    print(
        f"candidate {kernel_time(new):.1f} us, eager {kernel_time(ref):.1f} us, compile {kernel_time(compiled):.1f} us"
    )


if __name__ == "__main__":
    workspace, step = Path(sys.argv[1]).resolve(), sys.argv[2]
    {"compile": compile_step, "verify": verify_step, "profile": profile_step}[step](workspace)
