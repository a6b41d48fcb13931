"""What the scripted policy's attention kernel gives a whole model under torch.compile (issue 47's models): the
model's attention regions put back as the region tasks' solutions would put them back, timed against the compiled
original in one process.

    python benchmarks/attention_putback.py --model llama|gpt2 [--variants s3,bn128] [--put-back s3] [--rounds 5]
        [--out F]

The kernels are tests/usermodel/cuda_region_kernels.py's, built as one library of C++ operators per variant of the
attention kernel (VARIANTS: keys a step, K/V buffers; for the device's `a` target, as the evaluator builds). Each
attention region is written as its task, the policy writes the ModelNew it would submit for it (`model_new`), and
`putback.bind` / `rewrite` put that in the region's place: the path `cudagent optimize` takes, without the episodes.
Beside it, the same regions put back as an op that runs PyTorch's own causal flash path on the region's prologue
(`ceiling`: the best a kernel could reach here, not one cudagent may submit). Every variant is checked against the eager
model (largest difference and relative L2 of the last hidden state), timed by the evaluator's loop in `rounds`
interleaved rounds (medians, each variant's range of round medians), and profiled kernel by kernel
(benchmarks/compiled_profile.py's groups). One JSON object.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import types
from pathlib import Path

from alternatives import MODELS, built_model, emit  # benchmarks/ is on the path when a script in it runs
from compiled_profile import kernel_profile

REPO = Path(__file__).resolve().parents[1]

# a variant: attention_cu's arguments (keys a step, K/V buffers at 64 keys), and whether tiles get the proxy fence
# before the tensor cores read them
VARIANTS = {
    "s3": ({"block_n": 64, "stages": 3}, True),
    "s2": ({"block_n": 64, "stages": 2}, True),
    "bn128": ({"block_n": 128}, True),
    "s3_nofence": ({"block_n": 64, "stages": 3}, False),
}


def attention_source(variant: str) -> tuple[str, bool]:
    """The attention kernel's source for `variant`, and whether its tiles get the proxy fence. `head_<variant>`: the
    kernel as committed at git's HEAD, with the arguments of <variant> that its attention_cu takes (a change's A/B in
    one process; ATTENTION_HEAD_FILE: that file's text instead of git's, where the copy's git is not the checkout's)."""
    import inspect
    import os
    import subprocess

    from tests.usermodel.cuda_region_kernels import attention_cu

    arguments, fence = VARIANTS[variant.removeprefix("head_")]
    if not variant.startswith("head_"):
        return attention_cu(**arguments), fence
    if os.environ.get("ATTENTION_HEAD_FILE"):
        committed = Path(os.environ["ATTENTION_HEAD_FILE"]).read_text()
    else:
        committed = subprocess.run(
            ["git", "show", "HEAD:tests/usermodel/cuda_region_kernels.py"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    module: dict = {"__name__": "cuda_region_kernels_head"}
    exec(compile(committed, "cuda_region_kernels@HEAD", "exec"), module)
    made = module["attention_cu"]
    taken = inspect.signature(made).parameters
    return made(**{k: v for k, v in arguments.items() if k in taken}), fence


def build(variant: str, folder: Path) -> str:
    """The policy's kernels as C++ operators in a namespace of their own (one per variant); returns the namespace.
    Built in this process (torch's load_inline) and loaded; `s3_nofence` leaves out the fence between the tiles'
    loads and the tensor cores' reads (a diagnostic: what the fence costs, not a kernel to submit)."""
    import torch
    from torch.utils.cpp_extension import load_inline

    sys.path.insert(0, str(REPO))
    from cudagent.device.info import gencode, nvcc_arch
    from tests.usermodel.cuda_region_kernels import BINDING_CPP, LT_CPP, NORM_ROTARY_CU, SWIGLU_CU

    source, fence = attention_source(variant)
    if not fence:
        fence_text = 'asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");'
        assert source.count(fence_text) == 1, "the kernel's proxy fence is not where this variant expects it"
        source = source.replace(fence_text, "")
    arch = gencode(nvcc_arch(torch.cuda.get_device_capability()))
    namespace = f"attention_putback_{variant}"
    folder.mkdir(parents=True, exist_ok=True)
    load_inline(
        name=namespace,
        cpp_sources=[BINDING_CPP.replace("NAMESPACE", namespace), LT_CPP],
        cuda_sources=[source, SWIGLU_CU, NORM_ROTARY_CU],
        extra_ldflags=["-lcublasLt"],
        extra_cuda_cflags=["-O3", "-lineinfo", arch],
        build_directory=str(folder),
        is_python_module=False,
    )
    return namespace


def build_all(variants: list[str], root: Path) -> dict[str, str]:
    """Every variant built side by side (one process each), then loaded here."""
    from concurrent.futures import ProcessPoolExecutor

    import torch

    with ProcessPoolExecutor(len(variants)) as pool:
        names = dict(zip(variants, pool.map(build, variants, [root / v for v in variants]), strict=True))
    for variant, namespace in names.items():
        torch.ops.load_library(str(root / variant / f"{namespace}.so"))
    return names


def solution(region, program, values, folder: Path, namespace: str, name: str):
    """The ModelNew the scripted policy writes for `region`'s task (None where it writes none)."""
    import importlib.util

    from cudagent.usermodel.region_task import region_module, write_task
    from tests.usermodel.cuda_region_kernels import model_new

    task = write_task(region, region_module(program, region), values, folder, name, f"TORCH_LIBRARY({namespace}, m)")
    source = model_new(task.read_text())
    if source is None:
        return None
    path = folder / f"{name}_new.py"
    path.write_text(source)
    sys.modules.setdefault("cuda_extension", types.ModuleType("cuda_extension"))  # the ops are registered already
    spec = importlib.util.spec_from_file_location(f"{name}_new", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ModelNew()


def ceiling_op(region, program):
    """The region's own operators with its attention on PyTorch's causal flash path: a custom op with a Python body
    that runs the region's graph, SDPA told `is_causal` instead of reading the mask."""
    import torch.nn.functional as F

    from cudagent.usermodel.putback import region_graph, register

    gm = region_graph(program, region)
    for node in gm.graph.nodes:
        if node.op == "call_function" and "scaled_dot_product_attention" in str(node.target):
            node.args = node.args[:3]
            node.kwargs = {**node.kwargs, "is_causal": True}
            node.target = F.scaled_dot_product_attention
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return register(region, program, impl=lambda *tensors: gm(*tensors))


def region_check(region, program, values, namespaces: dict) -> dict:
    """One attention region alone, on fresh N(0, 1) activations (the model's own tables): each kernel's output
    against the region's operators in fp32 (the answer bf16 approximates) beside theirs in bf16, and each one's
    time beside the region's operators compiled (CUDA events, medians)."""
    import torch

    from cudagent.evaluator.compare import Tolerance, within_reference_error
    from cudagent.usermodel.putback import region_graph
    from cudagent.usermodel.region_proof import timed

    gm = region_graph(program, region)
    torch.manual_seed(1)

    def table(t) -> bool:  # Llama's cos and sin, [B or 1, 1, T, D]
        return t.dim() == 4 and t.shape[1] == 1

    # the tables as the model made them; q, k and v drawn
    inputs = [values[n] if table(values[n]) else torch.randn_like(values[n]) for n in region.inputs]
    with torch.no_grad():
        model = gm(*inputs)
        exact = gm(*[t.float() for t in inputs])
        sharp = [t if table(t) else t * 4 for t in inputs]
        model_sharp, exact_sharp = gm(*sharp), gm(*[t.float() for t in sharp])
    compiled = torch.compile(gm)
    out = {"model_error": float((model.float() - exact).abs().max()), "ms": {}}
    out["ms"]["region_compiled"] = round(timed(compiled, tuple(inputs), calls=50, cuda=inputs[0].is_cuda), 4)
    scale = next(n for n in gm.graph.nodes if "scaled_dot_product" in str(n.target)).kwargs.get("scale")
    for n, namespace in namespaces.items():
        ops = getattr(torch.ops, namespace)
        # Llama's region: q, k, v from the projections, then the tables; GPT-2's: q, k, v
        op = ops.rotary_attention if len(inputs) == 5 else ops.causal_attention

        def call(*t, op=op):
            return op(*t, scale)

        with torch.no_grad():
            got, got_sharp = call(*inputs).view(model.shape), call(*sharp).view(model.shape)
        out[f"kernel_{n}"] = {
            "error": float((got.float() - exact).abs().max()),
            "within_reference_error": within_reference_error(model, exact, got, Tolerance()).ok,
            "sharp_within_reference_error": within_reference_error(model_sharp, exact_sharp, got_sharp, Tolerance()).ok,
            "shapes": [list(t.shape) for t in inputs],
        }
        out["ms"][f"kernel_{n}"] = round(timed(call, tuple(inputs), calls=50, cuda=inputs[0].is_cuda), 4)
    return out


def main() -> None:
    import torch
    import transformers

    from cudagent.evaluator.timing.measure import Plan, measure
    from cudagent.usermodel.alternatives import prepared
    from cudagent.usermodel.putback import bind, rewrite
    from cudagent.usermodel.region_task import record_values
    from cudagent.usermodel.regions import capture, group

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--variants", default="s3,bn128", help=f"of {', '.join(VARIANTS)}, and head_<one of those>")
    parser.add_argument("--put-back", default=None, help="the variants put back into the model (default: all)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--build", default="/tmp/attention-putback")
    parser.add_argument("--out")
    a = parser.parse_args()
    variants = a.variants.split(",")
    t0 = time.monotonic()
    namespaces = build_all(variants, Path(a.build))
    found = {"model": a.model, "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    found.update(transformers=transformers.__version__, build_s=round(time.monotonic() - t0, 1))

    model, ids = built_model(a.model)
    found["inputs"] = list(ids.shape)
    program = capture(model, (ids,))
    values = record_values(program, (ids,))
    attention = [r for r in group(program) if r.anchor == "attention"]
    found["attention_regions"] = [{"inputs": r.inputs, "ops": r.shown_ops()} for r in attention[:1]]

    found["region"] = region_check(attention[0], program, values, namespaces)
    patched, bound = {}, {}
    for n in (a.put_back or a.variants).split(","):
        new = solution(attention[0], program, values, Path(a.build) / "tasks", namespaces[n], f"attention_{n}")
        if new is None:
            found.setdefault("errors", {})[f"kernel_{n}"] = "the policy wrote no ModelNew for the region"
            continue
        binding = bind(attention[0], program, new.cuda())
        bound[f"kernel_{n}"] = binding.how
        patched[f"kernel_{n}"] = rewrite(program, {r.name: (r, binding.target) for r in attention})
    ceiling = ceiling_op(attention[0], program)
    patched["ceiling"] = rewrite(program, {r.name: (r, ceiling) for r in attention})
    found["bound"] = bound

    with torch.no_grad():
        wide = copy.deepcopy(model).float()(ids).last_hidden_state.double()  # the fp32 model: what bf16 approximates
        expected = model(ids).last_hidden_state

        def errors(out):
            hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
            rel = float((hidden.double() - wide).norm() / wide.norm())
            largest = float((hidden.float() - expected.float()).abs().max())
            return {"max_abs_vs_original": largest, "rel_l2_vs_fp32": rel}

        found["accuracy"] = {"original": errors(model(ids)), **{k: errors(p(ids)) for k, p in patched.items()}}
    targets = {"original_compiled": prepared(model, "default", (ids,), {})}
    for name, gm in patched.items():
        targets[f"{name}_compiled"] = prepared(gm, "default", (ids,), {})
    plan = Plan(min_samples=20, min_seconds=0.2, max_seconds=5.0, warmup_calls=3)
    rounds: dict[str, list[float]] = {name: [] for name in targets}
    with torch.no_grad():
        for _ in range(a.rounds):
            for name, fn in targets.items():
                samples = measure(lambda k, fn=fn: fn(ids), 1, torch.device("cuda"), plan)
                rounds[name].append(statistics.median(samples["ms"]))
    ms = {n: round(statistics.median(v), 4) for n, v in rounds.items()}
    found["ms"], found["rounds"] = ms, a.rounds
    found["round_range_ms"] = {n: [round(min(v), 4), round(max(v), 4)] for n, v in rounds.items()}
    found["over_compile"] = {n: round(ms["original_compiled"] / v, 4) for n, v in ms.items()}
    found["profile"] = {name: kernel_profile(fn, (ids,)) for name, fn in targets.items()}
    emit(found, a.out)


if __name__ == "__main__":
    main()
