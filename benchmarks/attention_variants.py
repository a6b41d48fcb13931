"""The scripted policy's causal attention kernel (tests/usermodel/cuda_region_kernels.py) in its variants, side by
side on one GPU: warps a block (16 query rows each) and P V with P in one bf16 part or two (SPLIT_P: as exact as
fp32 P, at twice P V's tensor-core work). For each variant and issue 47's two attention shapes (the Llama's
[16,16,1024,128] and GPT-2's [32,12,1024,64]): its largest error against the fp32 answer on plain and on sharp rows
(q and k times 4, as the evaluator's stress trial draws) beside SDPA's own bf16 error, whether the evaluator's
half-precision rule passes it (compare.within_reference_error against SDPA with the traced mask as the reference),
and its time beside SDPA with the traced mask and SDPA's causal path (CUDA events, the median of interleaved rounds,
with their range).

    python benchmarks/attention_variants.py [--rounds 7] [--out F]

One JSON line a variant and shape; the variants are built in parallel processes.
"""

import argparse
import statistics
from concurrent.futures import ProcessPoolExecutor

from alternatives import emit  # benchmarks/ is on the path when a script in it runs

BINDING = r"""#include <torch/types.h>
#include <torch/library.h>
#include <c10/cuda/CUDAStream.h>
extern "C" cudaError_t causal_attention_launch(const void* q, const void* k, const void* v, void* out, int batch,
                                               int heads, int tokens, int dim, const int64_t* strides, float scale,
                                               cudaStream_t stream);
static torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) {
    const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
    auto out = torch::empty({b, t, h * d}, q.options());
    const int64_t st[9] = {q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                           v.stride(0), v.stride(1), v.stride(2)};
    TORCH_CHECK(causal_attention_launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), b, h, t, d, st,
                                        scale, c10::cuda::getCurrentCUDAStream().stream()) == cudaSuccess);
    return out;
}
TORCH_LIBRARY(NAME, m) { m.def("attention(Tensor q, Tensor k, Tensor v, float scale) -> Tensor"); }
TORCH_LIBRARY_IMPL(NAME, CUDA, m) { m.impl("attention", &attention); }
"""

VARIANTS = {"w4": (4, False), "w4_split_p": (4, True), "w8": (8, False), "w8_split_p": (8, True)}
SHAPES = [(16, 16, 1024, 128), (32, 12, 1024, 64)]


def variant_source(warps: int, split: bool) -> str:
    from tests.usermodel.cuda_region_kernels import ATTENTION_CU

    source = ATTENTION_CU
    for old, new in (
        ("constexpr int WARPS = 4,", f"constexpr int WARPS = {warps},"),
        ("constexpr bool SPLIT_P = false;", f"constexpr bool SPLIT_P = {'true' if split else 'false'};"),
    ):
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def build(name: str) -> str:
    import tempfile

    from torch.utils.cpp_extension import load_inline

    library = f"attention_variant_{name}"
    return load_inline(
        name=library,
        cpp_sources=[BINDING.replace("NAME", library)],
        cuda_sources=[variant_source(*VARIANTS[name])],
        extra_cuda_cflags=["-O3"],
        build_directory=tempfile.mkdtemp(),
        is_python_module=False,
    )


def clock(fn, calls=20):
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def measure(ops: dict, batch: int, heads: int, tokens: int, dim: int, rounds: int, out: str | None) -> None:
    import torch
    import torch.nn.functional as F

    from cudagent.evaluator.compare import Tolerance, within_reference_error
    from tests.usermodel.cuda_region_kernels import attention_inputs

    torch.manual_seed(0)
    scale = dim**-0.5
    q, k, v, mask = attention_inputs(batch, heads, tokens, dim)

    def flat(x):
        return x.transpose(1, 2).reshape(batch, tokens, heads * dim)

    with torch.no_grad():
        cases = {}
        for case, sharp in (("plain", 1), ("sharp", 4)):
            qs, ks = q * sharp, k * sharp
            exact = flat(F.scaled_dot_product_attention(qs.float(), ks.float(), v.float(), attn_mask=mask, scale=scale))
            reference = flat(F.scaled_dot_product_attention(qs, ks, v, attn_mask=mask, scale=scale))
            cases[case] = (qs, ks, exact, reference)
        contenders = {
            "sdpa_traced_mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale),
            "sdpa_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale),
        }
        for name, op in ops.items():
            contenders[name] = lambda op=op: op(q, k, v, scale)
        for fn in contenders.values():
            fn(), fn()
        times = {name: [] for name in contenders}
        for _ in range(rounds):
            for name, fn in contenders.items():
                times[name].append(clock(fn))
        flops = 4 * batch * heads * tokens * tokens * dim / 2
        for name in contenders:
            row = {
                "shape": [batch, heads, tokens, dim],
                "variant": name,
                "ms": round(statistics.median(times[name]), 4),
                "round_range_ms": [round(min(times[name]), 4), round(max(times[name]), 4)],
                "tflops_causal": round(flops / statistics.median(times[name]) / 1e9, 1),
            }
            if name in ops:
                warps, split = VARIANTS[name]
                row.update(warps=warps, split_p=split)
                for case, (qs, ks, exact, reference) in cases.items():
                    got = ops[name](qs, ks, v, scale)
                    verdict = within_reference_error(reference, exact, got, Tolerance())
                    row[f"{case}_max_error"] = round((got.float() - exact).abs().max().item(), 5)
                    row[f"{case}_sdpa_max_error"] = round((reference.float() - exact).abs().max().item(), 5)
                    row[f"{case}_passes_rule"] = verdict.ok
                    row[f"{case}_worst_tolerance_ratio"] = round(verdict.worst_tolerance_ratio, 3)
            row["device"] = torch.cuda.get_device_name()
            emit(row, out)


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out")
    a = parser.parse_args()
    with ProcessPoolExecutor(len(VARIANTS)) as pool:
        paths = dict(zip(VARIANTS, pool.map(build, VARIANTS)))
    ops = {}
    for name, path in paths.items():
        torch.ops.load_library(path)
        ops[name] = getattr(torch.ops, f"attention_variant_{name}").attention

    for shape in SHAPES:
        measure(ops, *shape, rounds=a.rounds, out=a.out)


if __name__ == "__main__":
    main()
