"""The GPU region test's scripted policy (cuda_region_kernels.py) read against real region tasks on the CPU: every
convolution region of ResNet-18 (examples/models/resnet.py) becomes a ModelNew of `conv_bn_act` calls, and that
ModelNew, with the operator given a plain PyTorch body here, computes what the task's Model does. What the GPU run
cannot afford to find out there: a region the policy misreads."""

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
def conv_op():
    library = torch.library.Library(NAMESPACE, "DEF")
    library.define(
        "conv_bn_act(Tensor x, Tensor w, Tensor gamma, Tensor beta, Tensor mean, Tensor var, Tensor? residual, "
        "int[] stride, int[] padding, float eps, bool relu) -> Tensor"
    )
    library.impl("conv_bn_act", _conv_bn_act, "CPU")
    sys.modules["cuda_extension"] = types.ModuleType("cuda_extension")  # what model_new.py imports
    yield
    del sys.modules["cuda_extension"]


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
