"""`cudagent optimize model.py:Stack` by fusion regions (the default) on the CPU: the model's graph grouped into
regions, the first kinds as tasks, a scripted model server that writes a known-good fused C++ kernel for a GEMM with
its GELU epilogue (one pass: the GEMM's row, its bias and the GELU, never written out between), one episode per kind,
the kernel put back as a custom op serving both layers, proved in the confined process in the mode asked, and the
exported package's `patch(model, x)` in a fresh process with nothing from cudagent: its output matches, and
torch.compile traces it in one graph."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.episodes import cli_env, cudagent, git
from tests.agent.script_server import ScriptedServer

MODEL = Path(__file__).with_name("model.py")

KERNEL = """#include <torch/types.h>
#include <torch/library.h>
#include <cmath>

// linear + GELU in one pass: each output is its row's dot product, its bias and the GELU, written once
static torch::Tensor linear_gelu(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "float32 contiguous input");
    const int64_t k = x.size(-1), n = w.size(0), m = x.numel() / k;
    auto sizes = x.sizes().vec();
    sizes.back() = n;
    auto out = torch::empty(sizes, x.options());
    const float *px = x.data_ptr<float>(), *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
#pragma omp parallel for
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            float acc = pb[j];
            for (int64_t t = 0; t < k; ++t) acc += px[i * k + t] * pw[j * k + t];
            po[i * n + j] = 0.5f * acc * (1.0f + std::erf(acc * 0.70710678f));
        }
    return out;
}

// the output's shape alone, for tracing (torch.compile, the put-back)
static torch::Tensor linear_gelu_meta(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    auto sizes = x.sizes().vec();
    sizes.back() = w.size(0);
    return torch::empty(sizes, x.options());
}

TORCH_LIBRARY(NAMESPACE, m) { m.def("linear_gelu(Tensor x, Tensor w, Tensor b) -> Tensor"); }
TORCH_LIBRARY_IMPL(NAMESPACE, CPU, m) { m.impl("linear_gelu", &linear_gelu); }
TORCH_LIBRARY_IMPL(NAMESPACE, Meta, m) { m.impl("linear_gelu", &linear_gelu_meta); }
"""

MODEL_NEW = """import torch
import torch.nn as nn

import cuda_extension  # noqa: F401  (loading it registers the operator)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.{w} = nn.Parameter(torch.empty({w_shape}), requires_grad=False)
        self.{b} = nn.Parameter(torch.empty({b_shape}), requires_grad=False)

    def forward(self, x):
        return torch.ops.{namespace}.linear_gelu(x.contiguous(), self.{w}, self.{b})
"""


def _solve(step: int, messages: list[dict]):
    """The scripted policy: for a region of `linear + gelu` (the task's forward calls aten.linear then aten.gelu), the
    fused kernel bound as a C++ operator in the namespace the task names, and a ModelNew with the task's parameter
    names and shapes calling it; any other region: finish."""
    import torch

    task = next(m["content"] for m in messages if m["role"] == "user")
    calls = re.findall(r"torch\.ops\.aten\.(\w+)\.default", task)
    weights = re.search(r"WEIGHTS = '([^']+)'", task)
    if calls != ["linear", "gelu"] or weights is None:
        return {"tool": "finish", "arguments": {"summary": "no kernel for this region"}}
    state = torch.load(weights.group(1), weights_only=True)
    (w, wt), (b, bt) = sorted(state.items(), key=lambda kv: kv[1].dim(), reverse=True)
    namespace = re.search(r"TORCH_LIBRARY\((\w+), m\)", task).group(1)  # the one the task names
    code = MODEL_NEW.format(w=w, b=b, w_shape=tuple(wt.shape), b_shape=tuple(bt.shape), namespace=namespace)
    kernel = KERNEL.replace("NAMESPACE", namespace)
    steps = [
        {"tool": "write_file", "arguments": {"path": "kernels/region_cpu.cpp", "content": kernel}},
        {"tool": "write_file", "arguments": {"path": "model_new.py", "content": code}},
        {"tool": "compile", "arguments": {}},
        {"tool": "verify", "arguments": {}},
        {"tool": "profile", "arguments": {}},
        {"tool": "finish", "arguments": {"summary": "linear + GELU in one OpenMP pass"}},
    ]
    return steps[min(step, len(steps) - 1)]


@pytest.fixture(scope="module")
def region_run(tmp_path_factory):
    """One model run by regions, shared by the tests below: Stack(dim=64, depth=2), its top 2 kinds, eager mode."""
    root = tmp_path_factory.mktemp("own-model-regions")
    home = root / "home"
    model = root / "project" / "model.py"
    model.parent.mkdir()
    shutil.copy2(MODEL, model)
    with ScriptedServer(_solve) as server:
        env = cli_env(home, server.url)
        done = cudagent(
            ["optimize", f"{model}:Stack", "--inputs", "x=f32[4,16,64]", "--top", "2", "--device", "cpu"]
            # a C++ GEMM against MKL's is slower: keep it anyway, to see it put back and proved
            + ["--mode", "eager", "--no-final-check", "--max-turns", "8", "--keep-slower", "--json"],
            env,
            cwd=root,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["event"] == "model_run", done.stdout[-2000:]
    return record, env, model.parent, done.stderr


@pytest.mark.slow
def test_a_models_regions_are_optimized_put_back_as_custom_ops_and_proved(region_run):
    record, env, root, said = region_run
    assert record["by"] == "regions" and record["state"] == "done", record
    assert "fusion regions, by kind" in said and "linear + gelu" in said, said[-3000:]
    spots = record["spots"]
    assert len(spots) == 2, spots
    fused = next(s for s in spots if s.get("outcome") == "kernel")
    assert len(fused["regions"]) == 2 and fused["tier"] >= 1, fused  # one kernel serves both layers' fc1 + GELU
    result = record["result"]
    assert result["mode"] == "eager" and result["correct"] is True, result
    assert result["verification"]["inputs"] == 3 and result["graph_breaks"] == 0 and result["graphs"] == 1, result
    assert {"eager", "patched", "compile", "patched_compile"} <= set(result["timing"]["ms"]), result["timing"]
    name = result["applied"][0]
    assert result["spots"][name]["model_ms_alone"] > 0, result["spots"]
    assert result["spots"][name]["bound"].endswith(".linear_gelu.default"), result["spots"]  # the graph calls it
    package = Path(result["package"])
    assert (package / "_putback.py").read_bytes() == (
        Path(__file__).parents[2] / "cudagent" / "usermodel" / "putback.py"
    ).read_bytes()
    files = git(record["repo"]["repo_dir"], "show", "--name-only", "--format=%s", "HEAD").split()
    assert any(f.endswith("kinds.json") for f in files) and "report.md" in files, files


@pytest.mark.slow
def test_the_region_package_patches_the_model_in_a_fresh_process_without_cudagent(region_run, tmp_path):
    record, env, project, _ = region_run
    dest = tmp_path / "stack_regions"
    done = cudagent(["export", record["run_id"], str(dest)], env)
    assert done.returncode == 0, done.stderr
    assert "patch(model, *example_inputs)" in done.stderr
    script = f"""
import sys, torch
sys.path[:0] = [{str(tmp_path)!r}, {str(project)!r}]
sys.modules["cudagent"] = None  # the package must need nothing from cudagent
from model import Stack
import stack_regions
torch.manual_seed(3)
model = Stack().eval()
x = torch.randn(4, 16, 64)
with torch.no_grad():
    expected = model(x)
    fast = stack_regions.patch(model, x)
    calls = [n for n in fast.graph.nodes if str(n.target).endswith(".linear_gelu.default")]
    assert not [n for n in fast.graph.nodes if str(n.target).startswith("cudagent_regions.")]
    assert all(b.startswith("operator ") for b in fast.bound.values()), fast.bound
    torch.testing.assert_close(fast(x), expected, rtol=1e-4, atol=1e-4)
    explained = torch._dynamo.explain(fast)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained
    try:  # a model whose graph is not the one the kernels were made for: refused, in one sentence
        stack_regions.patch(torch.nn.Sequential(torch.nn.Linear(64, 64)), x)
    except RuntimeError as exc:
        print("refused:", exc)
print(len(calls))
"""
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    served = sum(len(s["regions"]) for s in record["spots"] if s.get("outcome") == "kernel")
    assert int(ran.stdout.split()[-1]) == served == 2, ran.stdout
    assert "refused: " in ran.stdout and "is not the one its kernel was made for" in ran.stdout, ran.stdout
