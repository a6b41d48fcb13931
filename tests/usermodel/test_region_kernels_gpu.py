"""The scripted policy's region kernels (cuda_region_kernels.py) on their own, on the GPU: built as one library of
C++ operators (for the device's `a` target, as the evaluator builds: the attention kernel's warpgroup MMAs need it),
the causal attention kernel checked against SDPA with the mask a traced model builds, on Llama's and GPT-2's
attention shapes (and lengths that are not a multiple of the block, and k and v with fewer heads than q, GQA), with
the query in the layout the model hands it (a transposed view), and timed beside SDPA with that mask and SDPA's own
causal path (CUDA events, medians); Llama's whole attention region (its projections' outputs, the rotary embedding,
GQA's repeat, the causal mask) against the model's arithmetic and timed beside torch.compile's; Llama's residual
RMSNorm against the model's arithmetic; ResNet's convolution with its batch norm folded against PyTorch's in TF32,
as PyTorch runs it. Printed for the committed log."""

from __future__ import annotations

import shlex
import statistics

import pytest
import torch
import torch.nn.functional as F

from cudagent.evaluator.compare import Tolerance, within_reference_error
from tests.usermodel.cuda_region_kernels import (
    ATTENTION_CU,
    BINDING_CPP,
    CONV_BINDING_CPP,
    CONV_CU,
    LT_CPP,
    NORM_ROTARY_CU,
    SWIGLU_CU,
    attention_inputs,
)

NAMESPACE = "region_kernels_check"


def arch_flag() -> str:
    """The device's nvcc target as the evaluator's build names it (sm_90a on Hopper)."""
    from cudagent.device.info import gencode, nvcc_arch

    return gencode(nvcc_arch(torch.cuda.get_device_capability()))


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    from torch.utils.cpp_extension import load_inline

    load_inline(
        name=NAMESPACE,
        cpp_sources=[BINDING_CPP.replace("NAMESPACE", NAMESPACE), LT_CPP],
        cuda_sources=[ATTENTION_CU, SWIGLU_CU, NORM_ROTARY_CU],
        extra_ldflags=["-lcublasLt"],
        extra_cuda_cflags=["-O3", arch_flag()],
        build_directory=str(tmp_path_factory.mktemp("build")),
        is_python_module=False,
    )
    return getattr(torch.ops, NAMESPACE)


def _ms(fn, calls=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


@pytest.mark.parametrize(
    ("batch", "heads", "kv_heads", "tokens", "dim"),
    [(16, 16, 16, 1024, 128), (32, 12, 12, 1024, 64), (2, 4, 4, 1000, 128), (1, 2, 2, 77, 64), (2, 8, 2, 200, 128)],
)
def test_causal_attention_matches_sdpa_with_the_traced_mask(ops, batch, heads, kv_heads, tokens, dim):
    torch.manual_seed(0)
    scale = dim**-0.5
    q, k, v, mask = attention_inputs(batch, heads, tokens, dim)  # the query a transposed view, as the model's
    k, v = k[:, :kv_heads].contiguous(), v[:, :kv_heads].contiguous()
    group = heads // kv_heads
    wide_k, wide_v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # what GQA's repeat makes
    got = ops.causal_attention(q, k, v, scale)
    assert got.shape == (batch, tokens, heads * dim)
    with torch.no_grad():
        exact = F.scaled_dot_product_attention(q.float(), wide_k.float(), wide_v.float(), attn_mask=mask, scale=scale)
        sdpa = F.scaled_dot_product_attention(q, wide_k, wide_v, attn_mask=mask, scale=scale)
    exact = exact.transpose(1, 2).reshape(batch, tokens, heads * dim)
    sdpa = sdpa.transpose(1, 2).reshape(batch, tokens, heads * dim)
    ours, theirs = (got.float() - exact).abs().max().item(), (sdpa.float() - exact).abs().max().item()
    # P in bf16, as SDPA's own bf16 kernels: what the evaluator asks of a bf16 output is that it be no farther from
    # the fp32 answer than the bf16 reference is, plus bf16's tolerance (compare.within_reference_error)
    assert within_reference_error(sdpa, exact, got, Tolerance()).ok, (ours, theirs)
    assert ours <= 2 * theirs, (ours, theirs)  # and, kernel for kernel, of SDPA's own accuracy
    with torch.no_grad():  # sharp rows: what the evaluator's stress trial draws
        stress = ops.causal_attention(q * 4, k * 4, v, scale)
        sharp = F.scaled_dot_product_attention(
            q.float() * 4, wide_k.float() * 4, wide_v.float(), attn_mask=mask, scale=scale
        )
        sharp_sdpa = F.scaled_dot_product_attention(q * 4, wide_k * 4, wide_v, attn_mask=mask, scale=scale)
    sharp, sharp_sdpa = (t.transpose(1, 2).reshape(batch, tokens, heads * dim) for t in (sharp, sharp_sdpa))
    assert within_reference_error(sharp_sdpa, sharp, stress, Tolerance()).ok
    kernel = _ms(lambda: ops.causal_attention(q, k, v, scale))
    masked = _ms(lambda: F.scaled_dot_product_attention(q, wide_k, wide_v, attn_mask=mask, scale=scale))
    causal = _ms(lambda: F.scaled_dot_product_attention(q, wide_k, wide_v, is_causal=True, scale=scale))
    flops = 4 * batch * heads * tokens * tokens * dim / 2
    print(
        f"\n[{batch},{heads}/{kv_heads},{tokens},{dim}] error vs fp32: ours {ours:.4g}, sdpa {theirs:.4g}; "
        f"ms: kernel {kernel:.4f} ({flops / kernel / 1e9:.0f} TFLOP/s causal), "
        f"sdpa with the traced mask {masked:.4f}, sdpa causal {causal:.4f}"
    )


def _rotary_tables(tokens: int, dim: int):
    """cos and sin [1, 1, T, D] as a Llama's rotary embedding makes them (the angles' halves repeated), in bf16."""
    angles = torch.arange(tokens, device="cuda")[:, None] * (10000 ** (-torch.arange(0, dim, 2, device="cuda") / dim))
    both = torch.cat([angles, angles], -1)
    return both.cos().to(torch.bfloat16)[None, None], both.sin().to(torch.bfloat16)[None, None]


def _llama_attention(q, k, v, cos, sin, heads, kv_heads, scale, wide=False):
    """What a traced Llama's attention region computes from its projections' outputs (bf16, each step rounded as the
    model's operators round; `wide`: the attention itself in fp32, the answer bf16's approximates)."""
    (b, t, _), d = q.shape, cos.shape[-1]

    def rotated(x):
        return x * cos + torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1) * sin

    q = rotated(q.view(b, t, heads, d).transpose(1, 2))
    k = rotated(k.view(b, t, kv_heads, d).transpose(1, 2))
    v = v.view(b, t, kv_heads, d).transpose(1, 2)
    group = heads // kv_heads
    k = k[:, :, None].expand(b, kv_heads, group, t, d).reshape(b, heads, t, d)
    v = v[:, :, None].expand(b, kv_heads, group, t, d).reshape(b, heads, t, d)
    mask = torch.ones(t, t, device=q.device, dtype=torch.bool).tril().expand(b, 1, t, t)
    if wide:
        q, k, v = q.float(), k.float(), v.float()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out.transpose(1, 2).reshape(b, t, heads * d)


@pytest.mark.parametrize(("batch", "heads", "kv_heads", "tokens"), [(16, 16, 4, 1024), (2, 8, 2, 333)])
def test_llamas_attention_region_matches_the_models_arithmetic(ops, batch, heads, kv_heads, tokens):
    torch.manual_seed(0)
    dim, scale = 128, 128**-0.5
    q = torch.randn(batch, tokens, heads * dim, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(batch, tokens, kv_heads * dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    cos, sin = _rotary_tables(tokens, dim)
    got = ops.rotary_attention(q, k, v, cos, sin, scale)
    with torch.no_grad():
        model = _llama_attention(q, k, v, cos, sin, heads, kv_heads, scale)
        exact = _llama_attention(q, k, v, cos, sin, heads, kv_heads, scale, wide=True)
    assert got.shape == model.shape
    ours, theirs = (got.float() - exact).abs().max().item(), (model.float() - exact).abs().max().item()
    assert within_reference_error(model, exact, got, Tolerance()).ok, (ours, theirs)
    assert ours <= 2 * theirs, (ours, theirs)
    compiled = torch.compile(lambda q, k, v: _llama_attention(q, k, v, cos, sin, heads, kv_heads, scale))
    compiled(q, k, v)
    kernel, theirs_ms = _ms(lambda: ops.rotary_attention(q, k, v, cos, sin, scale)), _ms(lambda: compiled(q, k, v))
    print(
        f"\nLlama's attention region [{batch},{heads}/{kv_heads},{tokens},{dim}] (rotary, GQA, causal): error vs fp32 "
        f"ours {ours:.4g}, the model's {theirs:.4g}; ms: ours {kernel:.4f}, torch.compile {theirs_ms:.4f}"
    )


@pytest.fixture(scope="module")
def conv_ops(tmp_path_factory):
    from torch.utils.cpp_extension import load_inline

    from cudagent.evaluator.toolchain.extension import _cudnn_flags

    include, ld = _cudnn_flags()  # cuDNN where the evaluator's build finds it (torch's nvidia/cudnn)
    namespace = NAMESPACE + "_conv"
    load_inline(
        name=namespace,
        cpp_sources=[CONV_BINDING_CPP.replace("NAMESPACE", namespace)],
        cuda_sources=[CONV_CU],
        extra_include_paths=[shlex.split(flag)[-1] for flag in include],  # "-isystem DIR"
        extra_ldflags=ld,
        extra_cuda_cflags=["-O3"],
        build_directory=str(tmp_path_factory.mktemp("conv-build")),
        is_python_module=False,
    )
    return getattr(torch.ops, namespace)


@pytest.mark.parametrize(
    ("batch", "inputs", "outputs", "size", "kernel", "stride", "residual", "relu"),
    [
        (32, 64, 64, 56, 3, 1, False, True),  # layer1's conv1 + bn1 + relu
        (32, 64, 64, 56, 3, 1, True, True),  # its conv2 + bn2 + the residual + relu
        (32, 256, 512, 14, 1, 2, False, False),  # layer4's downsample: conv + bn alone
        (32, 3, 64, 224, 7, 2, False, True),  # the stem
    ],
)
def test_convolution_with_its_batch_norm_matches_pytorch(
    conv_ops, batch, inputs, outputs, size, kernel, stride, residual, relu
):
    torch.manual_seed(0)
    padding = kernel // 2
    conv = torch.nn.Conv2d(inputs, outputs, kernel, stride, padding, bias=False).cuda().eval()
    bn = torch.nn.BatchNorm2d(outputs).cuda().eval()
    with torch.no_grad():  # running statistics of a trained model, not the defaults
        bn.running_mean.normal_(0, 0.1)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.normal_(0, 0.1)
    x = torch.randn(batch, inputs, size, size, device="cuda")
    out_size = (size + 2 * padding - kernel) // stride + 1
    res = torch.randn(batch, outputs, out_size, out_size, device="cuda") if residual else None

    def reference():
        y = bn(conv(x))
        y = y + res if res is not None else y
        return torch.relu(y) if relu else y

    def ours():
        return conv_ops.conv_bn_act(
            x,
            conv.weight,
            bn.weight,
            bn.bias,
            bn.running_mean,
            bn.running_var,
            res,
            [stride, stride],
            [padding, padding],
            bn.eps,
            relu,
        )

    with torch.no_grad():
        expected, got = reference(), ours()
        torch.backends.cudnn.allow_tf32 = False
        exact = reference()
        torch.backends.cudnn.allow_tf32 = True
    assert got.shape == expected.shape
    ours_error, theirs = (got - exact).abs().max().item(), (expected - exact).abs().max().item()
    assert ours_error <= 2 * theirs + 1e-4, (ours_error, theirs)  # TF32 both, as PyTorch's default
    with torch.no_grad():
        kernel_ms, eager_ms = _ms(ours), _ms(reference)
    print(
        f"\nconv {inputs}->{outputs} k{kernel} s{stride} at {size}, residual {residual}, relu {relu}: error vs fp32 "
        f"ours {ours_error:.3g}, PyTorch {theirs:.3g}; ms: ours {kernel_ms:.4f}, PyTorch eager {eager_ms:.4f}"
    )


def _rmsnorm(x, w, eps):  # LlamaRMSNorm's arithmetic
    wide = x.float()
    return w * (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def test_rmsnorm_with_its_residual_matches_the_models_arithmetic(ops):
    torch.manual_seed(0)
    x, r = (torch.randn(16, 1024, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    w = torch.rand(2048, device="cuda", dtype=torch.bfloat16) + 0.5
    total, normed = ops.add_rmsnorm(x, r, w, 1e-6)
    assert torch.equal(total, x + r)  # the residual stream, exactly
    # the mean's summation order differs: one bf16 step at most in the normalized value, which the weight's product
    # rounds again (the model rounds twice): two bf16 steps of the output
    torch.testing.assert_close(normed, _rmsnorm(x + r, w, 1e-6), rtol=2**-6, atol=1e-3)
    torch.testing.assert_close(ops.rmsnorm(x, w, 1e-6), _rmsnorm(x, w, 1e-6), rtol=2**-6, atol=1e-3)
    compiled = torch.compile(lambda x, r: (x + r, _rmsnorm(x + r, w, 1e-6)))
    compiled(x, r)
    ours, theirs = _ms(lambda: ops.add_rmsnorm(x, r, w, 1e-6)), _ms(lambda: compiled(x, r))
    print(f"\nadd + RMSNorm [16,1024,2048]: ours {ours:.4f} ms, torch.compile's fused kernel {theirs:.4f} ms")
