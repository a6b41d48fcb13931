"""Fusion regions (cudagent/usermodel/regions.py) on graph shapes a model is made of, their tasks, and the put-back
as torch.library custom ops that torch.compile traces without a graph break (putback.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from cudagent.task import load_task, validate_task
from cudagent.usermodel.putback import register, rewrite
from cudagent.usermodel.region_task import measure, record_values, region_module, write_task
from cudagent.usermodel.regions import capture, group


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class LlamaLike(nn.Module):
    """Pre-norm block: RMSNorm, attention with an explicit softmax and mask, residual; RMSNorm, SwiGLU, residual."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False)
        self.down = nn.Linear(2 * d, d, bias=False)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + self.o(attn.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + x)


def _llama():
    torch.manual_seed(0)
    model = LlamaLike().eval()
    mask = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
    return model, (torch.randn(2, 6, 32), mask)


@pytest.fixture(scope="module")
def llama():
    model, args = _llama()
    program = capture(model, args)
    return model, args, program, group(program)


def _by_anchor(regions, anchor):
    return [r for r in regions if r.anchor == anchor]


def test_regions_of_a_pre_norm_block_fuse_around_the_heavy_operators(llama):
    _, _, _, regions = llama
    ops = [r.ops for r in regions]
    # the residual add goes with the normalization it feeds: the sum and the normed value are both outputs
    (norm2,) = [r for r in _by_anchor(regions, "norm") if "add" in r.ops]
    assert len(norm2.outputs) == 2, norm2
    # SwiGLU: both projections, the activation and the product are one region, with the down projection's add
    (gated,) = [r for r in regions if "silu" in r.ops]
    assert gated.ops.count("linear") == 2 and "mul" in gated.ops, gated.ops
    assert set(gated.weights) == {"gate.weight", "up.weight"}
    # attention: the scale, the mask and the softmax between the two products
    (attention,) = [r for r in regions if "softmax" in r.ops or "_softmax" in r.ops]
    assert {"masked_fill", "div"} <= set(attention.ops), attention.ops
    assert any("matmul" in o or "bmm" in o for o in ops), ops
    # every operator that computes is in exactly one region
    names = [n for r in regions for n in r.nodes]
    assert len(names) == len(set(names))
    assert all(r.fused_bytes >= 0 for r in regions) and gated.fused_bytes > 0


def test_a_convolution_takes_its_batch_norm_and_relu():
    model = ConvBlock().eval()
    regions = group(capture(model, (torch.randn(1, 8, 10, 10),)))
    convs = _by_anchor(regions, "conv")
    assert len(convs) == 2, [r.ops for r in regions]
    first, second = convs
    assert any("batch_norm" in o for o in first.ops) and "relu" in first.ops, first.ops
    assert "add" in second.ops and "relu" in second.ops, second.ops  # the residual and the activation
    assert first.kind == second.kind or first.ops != second.ops


def test_alike_layers_share_a_kind_and_one_op():
    model = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(3)]).eval()
    program = capture(model, (torch.randn(4, 16),))
    regions = group(program)
    assert len(regions) == 3 and len({r.kind for r in regions}) == 1, [r.describe() for r in regions]
    ops = {register(r, program) for r in regions}
    assert len(ops) == 1


def test_a_region_runs_alone_as_in_the_model_and_becomes_a_valid_task(llama, tmp_path):
    model, args, program, regions = llama
    values = record_values(program, args)
    measure(regions, program, values, "cpu")
    assert abs(sum(r.share for r in regions) - 1.0) < 1e-6
    (gated,) = [r for r in regions if "silu" in r.ops]
    gm = region_module(program, gated)
    out = gm(*[values[n] for n in gated.inputs])
    torch.testing.assert_close(out, values[gated.outputs[0]])
    path = write_task(gated, gm, values, tmp_path, "llama_mlp", "the MLP of LlamaLike")
    task = load_task(path)
    validate_task(task, "cpu")
    assert '"""the MLP of LlamaLike"""' in path.read_text()
    with torch.no_grad():  # the task's Model is the region, with the model's weights
        torch.testing.assert_close(task.module.Model()(*[values[n] for n in gated.inputs]), values[gated.outputs[0]])


@pytest.mark.slow
def test_the_put_back_is_traced_by_torch_compile_without_a_graph_break(llama):
    model, args, program, regions = llama
    chosen = [r for r in regions if r.anchor in ("gemm", "norm", "attention")]
    patched = rewrite(program, {r.name: (r, register(r, program)) for r in chosen})
    calls = [n for n in patched.graph.nodes if str(n.target).startswith("cudagent_regions.")]
    assert len(calls) == len(chosen)
    with torch.no_grad():
        expected = model(*args)
        torch.testing.assert_close(patched(*args), expected)
        explained = torch._dynamo.explain(patched)(*args)
        assert explained.graph_break_count == 0 and explained.graph_count == 1, explained
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(patched)(*args), expected, atol=1e-5, rtol=1e-5)


def _mlp_task(tmp_path):
    model = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(2)]).eval()
    x = torch.randn(4, 16)
    program = capture(model, (x,))
    regions = group(program)
    values = record_values(program, (x,))
    task = load_task(write_task(regions[0], region_module(program, regions[0]), values, tmp_path, "mlp", "an MLP"))
    return model, x, program, regions, task


def test_a_solution_of_a_region_task_serves_every_alike_region_with_its_own_weights(tmp_path):
    """A region's kernel goes back through its task's ModelNew: here a pure-torch one that fuses nothing, written as
    an agent's solution reads its weights (the task's parameter names), and called with each layer's weights."""

    from cudagent.usermodel.putback import kernel_call

    model, x, program, regions, task = _mlp_task(tmp_path)

    class ModelNew(task.module.Model):
        def forward(self, x):
            return F.gelu(x @ self.w_0_0_weight.t() + self.w_0_0_bias) * 1.0

    kernel = ModelNew()
    calls = []

    def counted(*tensors):
        calls.append(tensors[1].data_ptr())
        return kernel_call(kernel, regions[0])(*tensors)

    op = register(regions[0], program, impl=counted)
    patched = rewrite(program, {r.name + r.nodes[0]: (r, op) for r in regions})
    with torch.no_grad():
        torch.testing.assert_close(patched(x), model(x))
    assert len(calls) == 2 and calls[0] != calls[1]  # two layers, each with its own weight


class Chains(nn.Module):
    """Two linear layers, each followed by a long chain of elementwise work that changes nothing."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)

    def forward(self, x):
        y = self.a(x)
        for _ in range(150):  # some 150 kernels' launches and memory passes that one fused kernel saves
            y = y * 1.0
        z = self.b(F.relu(y))
        for _ in range(5):
            z = z + 0.0
        return z


@pytest.mark.slow
def test_a_region_is_kept_only_where_it_makes_the_model_faster_in_the_mode_asked():
    import time as clock

    from cudagent.usermodel.region_proof import prove_regions

    torch.manual_seed(0)
    model = Chains().eval()
    args = (torch.randn(1024, 64),)
    program = capture(model, args)
    regions = {r.modules[0]: r for r in group(program) if r.anchor == "gemm"}
    fast, slow = regions["a"], regions["b"]
    assert len(fast.ops) > 150 and len(slow.ops) > 5, [r.describe() for r in regions.values()]

    assert fast.ops[-1] == "relu" and slow.ops[0] == "linear"

    def fused(x, w, b):  # one kernel for the whole region: what the chain computes, without it
        return F.relu(F.linear(x, w, b))

    def sluggish(x, w, b):  # a correct kernel that is slower than what it replaces
        clock.sleep(0.02)
        return F.linear(x, w, b)

    wrong = Chains().b  # other weights: a kernel that computes something else
    chosen = {"a": (fast, register(fast, program, impl=fused))}
    chosen["b"] = (slow, register(slow, program, impl=sluggish))
    proof = prove_regions(model, args, {}, program, chosen, mode="eager", device="cpu", calls=5)
    assert proof.kept == ["a"] and "b" in proof.dropped, proof.to_dict()
    assert "ms eager with it put back" in proof.dropped["b"]

    chosen["b"] = (slow, register(slow, program, impl=lambda x, w, b: wrong(x)))
    proof = prove_regions(model, args, {}, program, chosen, mode="eager", device="cpu", calls=3)
    assert "outputs changed" in proof.dropped["b"], proof.to_dict()
    assert proof.ms["patched_eager"] < proof.ms["original_eager"], proof.to_dict()
    assert set(proof.ms) == {"original_eager", "patched_eager", "original_compiled", "patched_compiled"}


class Detour(nn.Module):
    """A product that would join two GEMMs' regions while a path between them runs through a normalization."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.norm = nn.Linear(16, 16), nn.Linear(16, 16), nn.LayerNorm(16)

    def forward(self, x):
        a = self.l1(x)
        t, r = torch.tanh(a), torch.relu(a)
        b = self.l2(self.norm(t))
        return r * b


def test_no_region_has_a_path_out_of_it_and_back_so_every_region_can_be_one_call():
    model = Detour().eval()
    args = (torch.randn(4, 16),)
    program = capture(model, args)
    regions = group(program)
    nodes = {n.name: n for n in program.graph.nodes}
    for region in regions:
        inside = {nodes[n] for n in region.nodes}
        frontier = [u for n in inside for u in n.users if u not in inside]
        seen = set()
        while frontier:
            node = frontier.pop()
            assert node not in inside, f"{region.describe()} is left and re-entered"
            if node not in seen:
                seen.add(node)
                frontier.extend(node.users)
    patched = rewrite(program, {r.name + r.nodes[0]: (r, register(r, program)) for r in regions})
    with torch.no_grad():
        torch.testing.assert_close(patched(*args), model(*args))


def test_a_written_out_rmsnorm_is_one_region_with_its_residual_and_rotary_stays_per_layer():
    """transformers' Llama in bf16: its RMSNorm is written out (`x.to(float32).pow(2).mean()`, rsqrt, the product,
    the cast back, the weight) and export puts a dtype check after each cast. The norm, its residual add and its
    weight are one region (two outputs: the sum and the normed value), and the rotary tables read by every layer do
    not chain the layers into one region that no call could stand for. The rotary embedding of q and k and GQA's
    repeat of k and v are each layer's attention's prologue: the attention reads the three projections' outputs and
    the tables, and the projections are GEMMs alone."""
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=100,
        use_cache=False,
    )
    model = LlamaModel(config).to(torch.bfloat16).eval()
    x = torch.randint(0, 100, (1, 16))
    program = capture(model, (x,))
    assert not [n for n in program.graph.nodes if "assert_tensor_metadata" in str(n.target)]
    regions = group(program)
    norms = [r for r in regions if {"mean", "rsqrt"} <= set(r.ops)]
    assert len(norms) == 5, [r.describe() for r in regions]  # two per layer and the final one
    residual = [r for r in norms if r.ops[0] == "add"]
    assert len(residual) == 4 and all(len(r.outputs) == 2 for r in residual[:-1]), [r.describe() for r in norms]
    assert all(r.ops[-1] == "mul" and len(r.weights) == 1 for r in norms)  # the weight's product is inside
    rotary = [r for r in regions if "neg" in r.ops]
    layers = [{m.split(".")[1] for m in r.modules} for r in rotary]  # each within one layer
    assert len(rotary) == 2 and all(len(found) == 1 for found in layers), [r.modules for r in rotary]
    assert all(r.anchor == "attention" and r.shown_ops().count("expand") == 2 for r in rotary), rotary
    projections = {n: r for r in regions for n in r.outputs if r.ops == ["linear"]}
    for r in rotary:  # q, k, v straight from their projections, then the two tables
        assert [projections[i].modules[0].rsplit(".", 1)[1] for i in r.inputs[:3]] == ["q_proj", "k_proj", "v_proj"]
        assert [r.shapes[i][-1] for i in r.inputs[3:]] == [16, 16], r.shapes
    patched = rewrite(program, {r.name + r.nodes[0]: (r, register(r, program)) for r in norms + rotary})
    with torch.no_grad():
        torch.testing.assert_close(patched(x).last_hidden_state, model(x).last_hidden_state)


class FusedQKVAttention(nn.Module):
    """One projection for q, k and v (as GPT-NeoX and Phi write it), the rotary embedding on q and k, causal SDPA."""

    def __init__(self, width: int = 32, heads: int = 4, tokens: int = 8):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(width, 3 * width), nn.Linear(width, width)
        angles = torch.arange(tokens)[:, None] * torch.rand(width // heads // 2)[None]
        self.register_buffer("cos", torch.cat([angles.cos()] * 2, -1))
        self.register_buffer("sin", torch.cat([angles.sin()] * 2, -1))

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = (y.view(b, t, self.heads, -1).transpose(1, 2) for y in self.qkv(x).split(w, dim=-1))

        def rotated(y):
            half = y.shape[-1] // 2
            return y * self.cos + torch.cat([-y[..., half:], y[..., :half]], -1) * self.sin

        out = F.scaled_dot_product_attention(rotated(q), rotated(k), v, is_causal=True)
        return self.out(out.transpose(1, 2).reshape(b, t, w))


def test_a_fused_projections_rotary_embedding_goes_to_its_attention_whole():
    """q, k and v from one projection, q and k rotated on the way: the rotary work of both, and the split, leave the
    projection's region for the attention's together (the projection is then a GEMM alone), and the put-back still
    computes the model. (Taken per input, each chain would have been left where it was: the split feeds the other
    two.)"""
    torch.manual_seed(0)
    model = FusedQKVAttention().eval()
    x = torch.randn(2, 8, 32)
    program = capture(model, (x,))
    regions = group(program)
    (attention,) = [r for r in regions if r.anchor == "attention"]
    assert attention.shown_ops().count("neg") == 2 and "split" in attention.ops, attention.describe()
    projection = next(r for r in regions if "linear" in r.ops and attention.inputs[0] in r.outputs)
    assert [op for op in projection.ops if op not in ("view", "_unsafe_view")] == ["linear"], projection.describe()
    assert set(attention.weights) == {"cos", "sin"}, attention.weights
    patched = rewrite(program, {r.name + r.nodes[0]: (r, register(r, program)) for r in regions})
    with torch.no_grad():
        torch.testing.assert_close(patched(x), model(x))


@torch.library.custom_op("cudagent_test_bind::linear_gelu", mutates_args=())
def _linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(x @ w.t() + b)


@_linear_gelu.register_fake
def _(x, w, b):
    return x.new_empty(x.shape[:-1] + w.shape[:1])


def test_a_kernel_bound_as_an_operator_is_called_by_the_graph_itself_and_any_other_through_python(tmp_path):
    """A solution that calls its kernel as an operator of its own (as a TORCH_LIBRARY op with a Meta kernel is) is
    traced into the model's graph: the graph calls that operator, not a Python-bodied region op, for every alike
    region with its own weights, and torch.compile takes it whole. A solution that cannot be traced on fake tensors
    (as a pybind11 function's cannot) is bound through Python, and says why."""
    from cudagent.usermodel.putback import bind

    model, x, program, regions, task = _mlp_task(tmp_path)

    class Native(task.module.Model):
        def forward(self, x):
            return torch.ops.cudagent_test_bind.linear_gelu(x.contiguous(), self.w_0_0_weight, self.w_0_0_bias)

    class Opaque(task.module.Model):
        def forward(self, x):
            assert x.data_ptr() != 0  # what a compiled function does with a tensor: no fake tensor has one
            return F.gelu(x @ self.w_0_0_weight.t() + self.w_0_0_bias)

    native = bind(regions[0], program, Native())
    assert native.native and native.how == "operator cudagent_test_bind.linear_gelu.default", native.how
    patched = rewrite(program, {r.name + r.nodes[0]: (r, native.target) for r in regions})
    targets = [str(n.target) for n in patched.graph.nodes if n.op == "call_function"]
    assert targets.count("cudagent_test_bind.linear_gelu.default") == 2, targets
    assert not any(t.startswith("cudagent_regions.") for t in targets), targets
    with torch.no_grad():
        torch.testing.assert_close(patched(x), model(x))
        explained = torch._dynamo.explain(patched)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained

    opaque = bind(regions[0], program, Opaque())
    assert not opaque.native and "cannot be traced on fake tensors" in opaque.how, opaque.how
    patched = rewrite(program, {r.name + r.nodes[0]: (r, opaque.target) for r in regions})
    targets = [str(n.target) for n in patched.graph.nodes if n.op == "call_function"]
    assert sum(t.startswith("cudagent_regions.") for t in targets) == 2, targets
    with torch.no_grad():
        torch.testing.assert_close(patched(x), model(x))


@torch.library.custom_op("cudagent_test_bind::causal_attention", mutates_args=())
def _causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


@_causal_attention.register_fake
def _(q, k, v, scale):
    return q.new_empty(q.shape[:-1] + v.shape[-1:])


def test_a_traced_causal_mask_folds_into_attention_and_a_kernel_may_know_it(tmp_path):
    """transformers' Llama, traced, materializes its causal mask from `arange`s (so torch.compile runs attention with
    an explicit mask, not the causal path). That construction is folded into each attention region: the region reads
    only q, k and v (its projections' outputs, with the rotary tables its prologue reads), its task builds the mask
    from their shapes, and a kernel that knows the mask is causal (never reads it) serves both layers; the patched
    graph no longer builds the mask at all."""
    import transformers

    from cudagent.usermodel.putback import bind

    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2
    )
    config.vocab_size = 100
    torch.manual_seed(0)
    model = transformers.LlamaModel(config).eval()  # use_cache as saved by default: on
    model.config.use_cache = False
    ids = torch.randint(0, 100, (2, 16))
    program = capture(model, (ids,))
    sdpa = next(n for n in program.graph.nodes if "scaled_dot_product_attention" in str(n.target))
    mask = sdpa.args[3].name
    attention = [r for r in group(program) if r.anchor == "attention"]
    assert len(attention) == 2 and len({r.kind for r in attention}) == 1, attention
    for region in attention:
        assert len(region.inputs) == 5 and mask not in region.inputs and mask in region.folded, region
        assert "arange" not in region.describe() and region.outputs == [region.nodes[-1]], region

    values = record_values(program, (ids,))
    gm = region_module(program, attention[0])
    path = write_task(attention[0], gm, values, tmp_path, "attention", "attention with its mask")
    validate_task(load_task(path), "cpu")  # the task builds its own mask
    task = load_task(path)
    scale = sdpa.kwargs["scale"]
    heads, kv_heads, dim = 4, 2, 16

    def rotated(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    class Causal(task.module.Model):
        def forward(self, q, k, v, cos, sin):
            b, t = q.shape[:2]
            q = rotated(q.view(b, t, heads, dim).transpose(1, 2), cos, sin)
            k = rotated(k.view(b, t, kv_heads, dim).transpose(1, 2), cos, sin).repeat_interleave(2, dim=1)
            v = v.view(b, t, kv_heads, dim).transpose(1, 2).repeat_interleave(2, dim=1)
            out = torch.ops.cudagent_test_bind.causal_attention(q, k, v, scale)
            return out.transpose(1, 2).reshape(b, t, heads * dim)

    with torch.no_grad():  # the kernel that never reads a mask matches the task's reference
        inputs = task.module.get_inputs()
        torch.testing.assert_close(Causal()(*inputs), task.module.Model()(*inputs))
    binding = bind(attention[0], program, Causal())
    assert binding.native, binding.how
    patched = rewrite(program, {r.name: (r, binding.target) for r in attention})
    assert mask not in {n.name for n in patched.graph.nodes}
    with torch.no_grad():
        torch.testing.assert_close(patched(ids)[0], model(ids).last_hidden_state)
