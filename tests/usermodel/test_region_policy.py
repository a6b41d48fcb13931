"""The GPU region test's scripted policy (cuda_region_kernels.py) read against real region tasks on the CPU: every
convolution region of ResNet-18 (examples/models/resnet.py) becomes a ModelNew of `conv_bn_act` calls, and a
transformers Llama's norm regions one `add_rmsnorm` or `rmsnorm` call each and its attention regions (the rotary
embedding and GQA's repeat with them) one `rotary_attention` call; each ModelNew, with the operators given PyTorch
bodies that round where the kernels round, computes what the task's Model does (the norms to the bit). What the GPU
run cannot afford to find out there: a region the policy misreads."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from cudagent.task import load_task
from cudagent.usermodel.region_task import record_values, region_module, write_task
from cudagent.usermodel.regions import capture, group
from tests.usermodel.cuda_region_kernels import is_convolution, model_new

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "resnet_policy_check"


def _conv_bn_act(x, w, gamma, beta, mean, var, residual, stride, padding, eps, relu):
    y = F.batch_norm(F.conv2d(x, w, None, stride, padding), mean, var, gamma, beta, False, 0.0, eps)
    y = y + residual if residual is not None else y
    return torch.relu(y) if relu else y


@pytest.fixture(scope="module")
def extension():
    """What model_new.py imports: here, nothing (the operators are registered with PyTorch bodies below)."""
    sys.modules["cuda_extension"] = types.ModuleType("cuda_extension")
    yield
    sys.modules.pop("cuda_extension", None)


@pytest.fixture(scope="module")
def conv_op(extension):
    library = torch.library.Library(NAMESPACE, "DEF")
    library.define(
        "conv_bn_act(Tensor x, Tensor w, Tensor gamma, Tensor beta, Tensor mean, Tensor var, Tensor? residual, "
        "int[] stride, int[] padding, float eps, bool relu) -> Tensor"
    )
    library.impl("conv_bn_act", _conv_bn_act, "CPU")
    return library


def test_every_convolution_region_of_resnet18_is_one_call_per_convolution(conv_op, tmp_path):
    spec = importlib.util.spec_from_file_location("resnet_example", REPO / "examples" / "models" / "resnet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.ResNet18()
    args = (torch.randn(2, 3, 32, 32),)
    program = capture(model, args)
    values = record_values(program, args)
    regions = [r for r in group(program) if any("conv2d" in op for op in r.ops)]
    assert len(regions) >= 15, [r.describe() for r in regions]  # the stem and every block's convolutions
    adds = 0
    for i, region in enumerate(regions):
        gm = region_module(program, region)
        path = write_task(region, gm, values, tmp_path, f"conv_{i}", f"bind as TORCH_LIBRARY({NAMESPACE}, m)")
        text = path.read_text()
        if not is_convolution(text):  # the stem's region takes the max pool too: not the policy's
            continue
        source = model_new(text)
        assert source is not None, text
        assert source.count(".conv_bn_act(") == text.count("aten.conv2d."), source
        adds += "aten.add." in text
        (tmp_path / f"conv_{i}_new.py").write_text(source)
        spec = importlib.util.spec_from_file_location(f"conv_{i}_new", tmp_path / f"conv_{i}_new.py")
        candidate = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(candidate)
        task = load_task(path)
        reference = task.module.Model()
        mine = candidate.ModelNew()
        mine.load_state_dict(reference.state_dict())  # strict: the same names and shapes
        inputs = [values[n] for n in region.inputs]
        with torch.no_grad():
            torch.testing.assert_close(mine(*inputs), reference(*inputs), rtol=1e-4, atol=1e-4)
    assert adds >= 8  # every block's second convolution takes its residual


LLAMA_NAMESPACE = "llama_policy_check"


def _add_rmsnorm(x, r, w, eps):
    total = x + r
    return total, _rmsnorm(total, w, eps)


def _rmsnorm(x, w, eps):
    wide = x.float()
    return w * (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotated(x, cos, sin):
    """x cos + rotate_half(x) sin, each step rounded to x's dtype (as the model's bf16 operators and the kernel)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def _rotary_attention(q, k, v, cos, sin, scale):
    (b, t, _), d = q.shape, cos.shape[-1]
    q = _rotated(q.view(b, t, -1, d).transpose(1, 2), cos, sin)
    k = _rotated(k.view(b, t, -1, d).transpose(1, 2), cos, sin)
    v = v.view(b, t, -1, d).transpose(1, 2)
    group = q.shape[1] // k.shape[1]  # query head h reads key head h // group
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, scale=scale)
    return out.to(q.dtype).transpose(1, 2).reshape(b, t, -1)


@pytest.fixture(scope="module")
def llama_ops(extension):
    library = torch.library.Library(LLAMA_NAMESPACE, "DEF")
    library.define("add_rmsnorm(Tensor x, Tensor r, Tensor w, float eps) -> (Tensor, Tensor)")
    library.define("rmsnorm(Tensor x, Tensor w, float eps) -> Tensor")
    library.define("rotary_attention(Tensor q, Tensor k, Tensor v, Tensor cos, Tensor sin, float scale) -> Tensor")
    for name, body in (("add_rmsnorm", _add_rmsnorm), ("rmsnorm", _rmsnorm), ("rotary_attention", _rotary_attention)):
        library.impl(name, body, "CPU")
    return library


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_llamas_norm_and_attention_regions_become_one_call_each(llama_ops, tmp_path):
    import transformers

    from cudagent.usermodel.modelrun import ModelRequest

    config = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2)
    transformers.LlamaConfig(**config, num_hidden_layers=2, vocab_size=500).save_pretrained(tmp_path / "llama")
    user = ModelRequest(hf=str(tmp_path / "llama"), inputs="input_ids=i64[2,32]<500").load()
    model, args, kwargs = user.make(seed=0, device="cpu", dtype="bfloat16")
    program = capture(model, args, kwargs)
    values = record_values(program, args, kwargs)
    served = []
    for i, region in enumerate(group(program)):
        gm = region_module(program, region)
        path = write_task(region, gm, values, tmp_path, f"region_{i}", f"bind as TORCH_LIBRARY({LLAMA_NAMESPACE}, m)")
        text = path.read_text()
        source = model_new(text)
        ops = ("add_rmsnorm", "rmsnorm", "rotary_attention")
        if source is None or not any(f".{op}(" in source for op in ops):
            continue
        served.append(next(op for op in ops if f".{op}(" in source))
        (tmp_path / f"region_{i}_new.py").write_text(source)
        reference = load_task(path).module.Model()
        mine = _load(tmp_path / f"region_{i}_new.py", f"region_{i}_new").ModelNew()
        mine.load_state_dict(reference.state_dict())
        inputs = [values[n] for n in region.inputs]
        if served[-1] == "rotary_attention":  # the task's own inputs: a random-weight model's attention is near uniform
            torch.manual_seed(i)
            inputs = load_task(path).module.get_inputs()
        with torch.no_grad():
            expected, got = reference(*inputs), mine(*inputs)
        if served[-1] == "rotary_attention":  # q and k rotated to the bit, the attention in fp32 (SDPA's own math)
            torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
        else:  # rounded where the model rounds: the same bits
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    # the first layer's own norm; the residual norms after each attention, before the second layer and the final one;
    # both layers' attention
    assert served.count("rmsnorm") == 1 and served.count("add_rmsnorm") == 4, served
    assert served.count("rotary_attention") == 2, served
