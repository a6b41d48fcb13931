"""A half-precision task whose reference is farther from the answer than the tolerance (a bf16 sum rounded at every
step, evaluator/exact.py): a candidate that sums in fp32 is accepted for being closer to the answer, and was
rejected before (the defence off: judged against the bf16 reference alone); one that reflects the reference's error
about the answer, twice as far from it, is rejected."""

from __future__ import annotations

import textwrap

import pytest

TASK = '''"""Column sums of a long bf16 matrix, added one row at a time (each partial sum rounded to bf16)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = x[0]
        for i in range(1, x.shape[0]):
            acc = acc + x[i]
        return acc


def get_inputs():
    return [torch.rand(256, 2048).to(torch.bfloat16)]


def get_init_inputs():
    return []
'''

KERNEL = r"""
// Column sums of a bf16 matrix: in fp32 (`column_sum`), or the reference's bf16 steps reflected about the fp32 sum
// (`column_sum_reflected`, an attacker's: as far from the reference as the reference is from the answer).
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

static torch::Tensor column_sum_impl(torch::Tensor x, bool reflect) {
    TORCH_CHECK(x.is_cpu() && x.is_contiguous() && x.dim() == 2 && x.scalar_type() == torch::kBFloat16,
                "column_sum: a contiguous 2-D bf16 CPU tensor");
    const int64_t rows = x.size(0), cols = x.size(1);
    auto out = torch::empty({cols}, x.options());
    const c10::BFloat16* in = x.data_ptr<c10::BFloat16>();
    c10::BFloat16* o = out.data_ptr<c10::BFloat16>();
    for (int64_t c = 0; c < cols; ++c) {
        float exact = 0.f;
        c10::BFloat16 stepped = in[c];
        for (int64_t r = 0; r < rows; ++r) {
            exact += static_cast<float>(in[r * cols + c]);
            if (r > 0) stepped = c10::BFloat16(static_cast<float>(stepped) + static_cast<float>(in[r * cols + c]));
        }
        o[c] = c10::BFloat16(reflect ? 2.f * static_cast<float>(stepped) - exact : exact);
    }
    return out;
}

static torch::Tensor column_sum(torch::Tensor x) { return column_sum_impl(x, false); }
static torch::Tensor column_sum_reflected(torch::Tensor x) { return column_sum_impl(x, true); }

static void register_column_sum(pybind11::module& m) {
    m.def("column_sum", &column_sum, "column sums in fp32");
    m.def("column_sum_reflected", &column_sum_reflected, "the reference's error, reflected");
}

REGISTER_BINDING(column_sum, register_column_sum);
"""

MODEL_NEW = """
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def forward(self, x):
        return cuda_extension.{fn}(x)
"""


def _evaluate(tmp_path, fn: str):
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for

    (tmp_path / "task").mkdir(parents=True)
    (tmp_path / "task" / "bf16_column_sum.py").write_text(TASK)
    task = load_task(tmp_path / "task" / "bf16_column_sum.py")
    candidate = tmp_path / fn
    (candidate / "kernels").mkdir(parents=True)
    (candidate / "kernels" / "column_sum.cpp").write_text(textwrap.dedent(KERNEL))
    (candidate / "model_new.py").write_text(MODEL_NEW.format(fn=fn))
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=False)) as evaluator:
        return evaluator.evaluate(workspace_for(resolve_candidate(candidate), task.source))


@pytest.mark.slow  # two evaluations with a build (about 40 s on two cores)
def test_closer_to_the_answer_than_the_reference_is_accepted(tmp_path, monkeypatch):
    v = _evaluate(tmp_path / "on", "column_sum")
    assert v.correct, v.summary()
    assert any("no farther from its fp32 answer" in n for n in v.notes), v.notes
    import cudagent.evaluator.exact as exact

    def no_answer(model):
        raise RuntimeError("the defence off: no fp32 answer")

    monkeypatch.setattr(exact, "carried_in_fp32", no_answer)
    off = _evaluate(tmp_path / "off", "column_sum")
    assert not off.correct and "OUTPUT_MISMATCH" in {x.code for x in off.violations}, off.summary()


@pytest.mark.slow
def test_the_references_error_reflected_about_the_answer_is_rejected(tmp_path):
    v = _evaluate(tmp_path, "column_sum_reflected")
    assert not v.correct and "farther from the fp32 answer" in v.summary(), v.summary()
