"""`cudagent optimize` by fusion regions on the GPU: GPT-2 small's widths and a Llama-shaped config (GQA, RMSNorm,
SwiGLU, rotary), two layers each, built from configs with random weights (`--hf DIR --dtype bfloat16`), and ResNet-18
in fp32 from a model file of its own (examples/models/resnet.py). The model's regions are found and ranked, the first
kinds become tasks, the scripted policy plays known-good fused kernels (cuda_region_kernels.py: a cuBLASLt GEMM with
GPT-2's bias + tanh-GELU epilogue; SwiGLU's two GEMMs and product; causal attention; cuDNN convolutions with their
batch norm folded, the residual and the ReLU), bound as C++ operators the patched graph calls itself; the proof holds
them to the torch.compile mode the original runs fastest in (auto: default, reduce-overhead or max-autotune), keeps a
kind only if the model gets faster with it there, and times what else a user could run beside it (every compile
mode, Liger Kernel for the Llama). The record is printed for the committed log
(benchmarks/results/regions/gpu-optimize-regions-*.txt)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cudagent.usermodel.alternatives import strongest_mode
from tests.agent.episodes import cli_env
from tests.agent.script_server import ScriptedServer
from tests.usermodel.cuda_region_kernels import solve

MODELS = {
    "gpt2": (
        "GPT2Config",
        {"n_layer": 2, "n_embd": 768, "n_head": 12, "n_positions": 1024, "vocab_size": 50257, "use_cache": False},
        "input_ids=i64[8,512]<50257",
        "4",
    ),
    # the same model with 8x the tokens: compiled, [8,512] is set by the host's pace (0.69 ms a call against some 0.3
    # ms of GPU work), where no kernel can help; here the GPU's work sets it
    "gpt2_32x1024": (
        "GPT2Config",
        {"n_layer": 2, "n_embd": 768, "n_head": 12, "n_positions": 1024, "vocab_size": 50257, "use_cache": False},
        "input_ids=i64[32,1024]<50257",
        "2",  # the MLP's GEMM + GELU, and attention
    ),
    "llama": (
        "LlamaConfig",
        {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "num_hidden_layers": 2,
            "vocab_size": 32000,
            "use_cache": False,
        },
        "input_ids=i64[4,512]<32000",
        "2",
    ),
}
MODELS["llama_16x1024"] = (*MODELS["llama"][:2], "input_ids=i64[16,1024]<32000", "4")  # through attention
# a model file of the user's own, in fp32: convolutions with their batch norm, residual and ReLU (kinds by shape)
MODELS["resnet18"] = ("examples/models/resnet.py:ResNet18", None, "x=f32[32,3,224,224]", "4")


@pytest.mark.serial
@pytest.mark.parametrize("name", list(MODELS))
def test_a_models_fusion_regions_are_optimized_and_put_back_under_torch_compile(tmp_path, name):
    import transformers

    source, fields, inputs, top = MODELS[name]
    if fields is None:  # a file and its class
        target = [source]
    else:  # a transformers config, saved as a user saves one, in bf16
        directory = tmp_path / name
        getattr(transformers, source)(**fields).save_pretrained(directory)
        target = ["--hf", str(directory), "--dtype", "bfloat16"]
    with ScriptedServer(solve) as server:
        env = cli_env(tmp_path / "home", server.url)
        done = subprocess.run(
            [sys.executable, "-m", "cudagent", "optimize", *target, "--inputs", inputs]
            + ["--top", top, "--max-turns", "10", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            timeout=1800,
        )
    assert done.returncode == 0, done.stdout[-3000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({k: record.get(k) for k in ("run_id", "model", "inputs", "device", "wall_ms", "by")}, indent=1))
    for spot in record["spots"]:
        print(json.dumps({k: v for k, v in spot.items() if k != "regions"}, default=str))
    result = record["result"]
    print(json.dumps(result, indent=1, default=str))
    if result.get("package"):
        print((Path(result["package"]).parent / "report.md").read_text())
    for spot in record["spots"]:  # an episode whose kernel did not verify: its turns, for the log
        if spot.get("run_id") and spot.get("outcome") != "kernel":
            lines = (tmp_path / "home" / "runs" / spot["run_id"] / "trajectory.jsonl").read_text().splitlines()
            if any('"compile"' in line for line in lines):
                print(f"--- {spot['spot']}: {spot.get('outcome')}; its turns:")
                for line in lines[1:]:
                    print(line[:2500])
    assert record["by"] == "regions"
    fused = [s for s in record["spots"] if (s.get("tier") or -1) >= 1]
    assert fused, record["spots"]
    if fields is not None:  # a transformer's kinds: one kernel, every layer's place (a norm has more than one a layer)
        assert all(len(s["regions"]) >= 2 for s in fused), record["spots"]
    # the bar: the torch.compile mode the original runs fastest in, of the three timed (the default within 1%)
    assert result.get("mode_asked") == "auto" and set(result["modes_ms"]) == {
        "default",
        "reduce-overhead",
        "max-autotune",
    }
    assert result["mode"] == strongest_mode(result["modes_ms"]) and result["spots"], result
    for name in result["spots"]:  # every kernel the policy wrote is a C++ operator the graph calls itself
        assert result["spots"][name]["bound"].startswith("operator "), result["spots"]
    if result.get("applied"):
        assert result["correct"] is True and result["graph_breaks"] == 0, result
        assert {"compile", "compile_reduce_overhead", "compile_max_autotune"} <= set(result["timing"]["ms"]), result
