"""`cudagent hotspots` on a user's own model: the three input routes, a transformers model from a config alone, the
files it saves, and one sentence for each bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.agent.episodes import cli_env, cudagent

HERE = Path(__file__).parent
MODEL = HERE / "model.py"


def _run(tmp_path, *args, cwd=None):
    return cudagent(["hotspots", *args, "--device", "cpu", "--iterations", "2"], cli_env(tmp_path / "home", None), cwd)


def _json(done):
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _spots(record) -> dict:
    return {s["spot"]: s for s in record["spots"]}


@pytest.mark.slow
def test_written_inputs_rank_the_leaf_modules_and_the_ops_of_each_forward(tmp_path):
    out = tmp_path / "o"
    done = _run(tmp_path, f"{MODEL}:Stack", "--inputs", "x=f32[8,32,64]", "--modules", "--json", "--out", str(out))
    record = _json(done)
    assert "profiler_start" not in done.stderr, done.stderr  # kineto's own lines are not the user's to read
    spots = _spots(record)
    # every leaf module of the two blocks and the head, each with the inputs it saw
    for i in (0, 1):
        assert spots[f"blocks.{i}.fc1"]["kind"] == "Linear" and spots[f"blocks.{i}.fc1"]["shapes"] == ["8x32x64"]
        assert spots[f"blocks.{i}.fc2"]["shapes"] == ["8x32x256"] and spots[f"blocks.{i}.act"]["kind"] == "GELU"
        assert spots[f"blocks.{i}.norm"]["kind"] == "LayerNorm"
        assert spots[f"blocks.{i}: aten::add"]["calls"] == 1  # the residual, an op of the block's own forward
    assert spots["(model): aten::softmax"]["dtypes"] == ["float32"]
    assert spots["head"]["calls"] == 1 and spots["head"]["dtypes"] == ["float32"]
    shares = [s["share"] for s in record["spots"]]
    assert shares == sorted(shares, reverse=True) and abs(sum(shares) - 1) < 1e-6
    assert [s["rank"] for s in record["spots"]] == list(range(1, len(shares) + 1))
    assert record["inputs"] == "x=float32[8,32,64]" and record["total_ms"] > 0 and record["wall_ms"] > 0
    assert (out / "hotspots.png").read_bytes().startswith(b"\x89PNG")
    assert "| 1 |" in (out / "hotspots.md").read_text() and json.loads((out / "hotspots.json").read_text())


@pytest.mark.slow
def test_get_inputs_in_the_file_and_a_captured_call_give_the_inputs(tmp_path):
    with_inputs = tmp_path / "with_inputs.py"
    with_inputs.write_text(
        MODEL.read_text() + "\n\nimport torch\n\n\ndef get_inputs():\n    return [torch.randn(2, 8, 48)]\n\n\n"
        "def get_init_inputs():\n    return [48, 1]\n"
    )
    spots = _spots(_json(_run(tmp_path, f"{with_inputs}:Stack", "--modules", "--json")))
    assert spots["blocks.0.fc1"]["shapes"] == ["2x8x48"] and "blocks.1.fc1" not in spots  # depth 1 from init

    # --example: the script builds Stack(dim=32, depth=3) and calls it; the call's shapes come back, and with
    # --init saying how to build it, its three blocks
    captured = _json(
        _run(
            tmp_path,
            f"{MODEL}:Stack",
            "--example",
            str(HERE / "run_model.py"),
            "--init",
            "{'dim': 32, 'depth': 3}",
            "--modules",
            "--json",
        )
    )
    assert captured["inputs"] == "float32[4,16,32]"  # the script passed it positionally
    assert _spots(captured)["blocks.2.fc1"]["shapes"] == ["4x16x32"]
    assert "with the weights --example ran" in captured["built"]


@pytest.mark.slow
def test_a_transformers_model_from_a_config_alone(tmp_path):
    from transformers import GPT2Config

    directory = tmp_path / "gpt2-tiny"
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64, bos_token_id=0, eos_token_id=0)
    config.save_pretrained(directory)
    out = tmp_path / "o"
    args = ["--inputs", "input_ids=i64[2,32]<500", "--modules", "--tasks", "40", "--out", str(out), "--json"]
    record = _json(_run(tmp_path, "--hf", str(directory), *args))
    spots = _spots(record)
    assert record["model"] == "hf:gpt2-tiny" and record["notes"] == [
        "no weights in the directory: built from its config with random weights",
        "its key/value cache is off for the forward being optimized (in memory: config.json is untouched)",
    ]
    assert spots["h.0.mlp.c_fc"]["kind"] == "Conv1D" and spots["h.0.mlp.c_fc"]["shapes"] == ["2x32x64"]
    assert any(s.startswith("h.1.attn: ") for s in spots)  # the attention's own ops, beside its projections
    # transformers' own Conv1D becomes a task that imports it as the model does; both layers' c_fc share it
    tasks = {e["spot"]: e for e in record["tasks"]}
    c_fc = next(e for e in tasks.values() if e["task"] and "h.0.mlp.c_fc" in e["modules"])
    assert set(c_fc["modules"]) == {"h.0.mlp.c_fc", "h.1.mlp.c_fc"} and c_fc["kind"] == "Conv1D"
    assert "from transformers.pytorch_utils import Conv1D" in Path(c_fc["task"]).read_text()
    default = _json(
        _run(tmp_path, "--hf", str(directory), "--modules", "--json")
    )  # no --inputs: ids within vocabulary, positions
    assert default["inputs"] == "input_ids=int64[1,64]<500"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["missing.py:Block"], "missing.py does not exist; give the Python file that defines your module"),
        ([f"{MODEL}:Nope", "--inputs", "x=f32[2]"], "defines no module class Nope (its module classes: Block, Stack)"),
        ([str(MODEL), "--inputs", "x=f32[2]"], "defines several module classes (Block, Stack); name one, e.g."),
        ([f"{MODEL}:Block"], "has no example inputs: give --inputs 'x=f32[8,1024]', --example script.py"),
        ([f"{MODEL}:Block", "--inputs", "x=q8[2,64]"], "unknown dtype 'q8'"),
        ([f"{MODEL}:Block", "--inputs", "x=f32[2,64"], "is neither a tensor (like bf16[8,1024]) nor a Python value"),
        ([f"{MODEL}:Block", "--inputs", "x=f32[2,63]"], "model.py:Block raised RuntimeError on the inputs"),
        ([f"{MODEL}:Block", "--init", "[", "--inputs", "x=f32[2,64]"], "is not a Python list or dict of values"),
        ([f"{MODEL}:Block", "--init", "[1, 2, 3, 4]", "--inputs", "x=f32[2,64]"], "could not be built (TypeError"),
        ([f"{MODEL}:Block", "--example", str(MODEL)], "ran without calling a Block from model.py"),
        (["--hf", str(HERE)], "holds no config.json; give a transformers model directory"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, args, said):
    done = _run(tmp_path, *args)
    assert done.returncode == 2, done.stderr[-2000:]
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("cudagent: ") and said in message, done.stderr[-2000:]
    assert not (tmp_path / "home" / "hotspots").exists()  # nothing saved for a run that did not happen


@pytest.mark.slow
def test_the_top_spots_become_validated_tasks_with_the_models_weights(tmp_path):
    import importlib.util

    import torch

    out = tmp_path / "o"
    record = _json(
        _run(
            tmp_path,
            f"{MODEL}:Stack",
            "--inputs",
            "x=f32[4,16,64]",
            "--modules",
            "--tasks",
            "30",
            "--json",
            "--out",
            str(out),
        )  # fmt: skip
    )
    extracted = {e["spot"]: e for e in record["tasks"]}
    assert len(extracted) == len(record["spots"])  # every spot: a task or a reason
    tasks = [e for e in record["tasks"] if e["task"]]
    for e in tasks:
        assert Path(e["task"]).parent == out / "tasks" and e["spot"] in e["modules"], e
    # alike modules (both blocks' fc1, both fc2, both norms) share one task, whose share is theirs together
    for pair in (
        ("blocks.0.fc1", "blocks.1.fc1"),
        ("blocks.0.fc2", "blocks.1.fc2"),
        ("blocks.0.norm", "blocks.1.norm"),
    ):
        serving = [e for e in tasks if set(pair) <= set(e["modules"])]
        assert len(serving) == 1, (pair, tasks)
        other = next(p for p in pair if p != serving[0]["spot"])
        assert "its task serves both" in extracted[other]["reason"]
        own = {s["spot"]: s["share"] for s in record["spots"]}
        assert serving[0]["share"] == pytest.approx(own[pair[0]] + own[pair[1]])
    assert any(e["spot"] == "head" and e["modules"] == ["head"] for e in tasks)
    assert "not a module; only modules become tasks so far" in extracted["(model): aten::softmax"]["reason"]

    fc1 = next(e for e in tasks if "blocks.1.fc1" in e["modules"])
    spec = importlib.util.spec_from_file_location("fc1_task", fc1["task"])
    task = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(task)
    from tests.usermodel.model import Stack

    torch.manual_seed(0)  # how the model was built (loading.py): the task holds those weights, not new ones
    original = Stack().eval()
    reference = task.Model().eval()
    module = original.get_submodule(fc1["spot"])
    torch.testing.assert_close(reference.op.weight, module.weight, rtol=0, atol=0)
    (x,) = task.get_inputs()
    assert x.shape == (4, 16, 64) and x.dtype == torch.float32
    torch.testing.assert_close(reference(x), module(x))


def test_alike_modules_that_one_task_serves_count_once_toward_the_top_n(tmp_path):
    """`--tasks 2` (as `optimize --top 2`) means two distinct spots: a block's fc1 that the other block's fc1 task
    serves is listed but takes no place of its own, as on a GPT-2 whose hottest spots come in pairs."""
    out = tmp_path / "o"
    record = _json(
        _run(
            tmp_path,
            f"{MODEL}:Stack",
            "--inputs",
            "x=f32[4,16,64]",
            "--modules",
            "--tasks",
            "2",
            "--json",
            "--out",
            str(out),
        )  # fmt: skip
    )
    # the tasks made; an operator spot that ranks among them (timing noise on a loaded machine decides that) is listed
    # with its reason and made no task
    own = [e for e in record["tasks"] if e["task"]]
    assert len(own) == 2, record["tasks"]
    served = [e for e in record["tasks"] if "its task serves both" in (e["reason"] or "")]
    chosen = {m for e in own for m in e["modules"]}
    assert served and all(e["spot"] in chosen for e in served), record["tasks"]
    assert len(list((out / "tasks").glob("*.py"))) == sum(1 for e in own if e["task"])


@pytest.mark.slow
def test_regions_in_bf16_rank_fused_work_and_become_tasks(tmp_path):
    out = tmp_path / "r"
    done = _run(
        tmp_path,
        f"{MODEL}:Stack",
        "--inputs",
        "x=f32[4,16,64]",
        "--dtype",
        "bfloat16",  # fusion regions are the default
        "--tasks",
        "2",
        "--json",
        "--out",
        str(out),
    )
    record = _json(done)
    assert record["dtype"] == "bfloat16" and record["model"].endswith("Stack")
    kinds = record["kinds"]
    (mlp,) = [k for k in kinds if k["ops"][:2] == ["linear", "gelu"]]  # fc1 + GELU, one kind for both blocks
    assert len(mlp["regions"]) == 2, kinds
    assert any("layer_norm" in k["ops"] and "add" in k["ops"] for k in kinds)  # the residual with the next norm
    shares = [k["share"] for k in kinds]
    assert abs(sum(shares) - 1) < 1e-3 and [k["ms"] for k in kinds] == sorted((k["ms"] for k in kinds), reverse=True)
    tasks = [k["task"] for k in kinds[:2]]
    assert all(tasks) and len(set(tasks)) == 2, kinds[:2]  # the two kinds that hold the most time
    text = Path(tasks[0]).read_text()
    assert "torch.compile" in text and "dtype=torch.bfloat16" in text and "of the model's region time" in text
    assert (out / "regions.md").read_text().count("| ") > 10


@pytest.mark.slow
def test_a_model_torch_export_cannot_capture_is_ranked_by_modules_with_one_line_saying_so(tmp_path):
    model = tmp_path / "branchy.py"
    model.write_text(
        "import torch.nn as nn\n\n\nclass Branchy(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)\n\n    def forward(self, x):\n"
        "        return self.a(x) if x.sum() > 0 else self.b(x)\n"
    )
    done = _run(tmp_path, f"{model}:Branchy", "--inputs", "x=f32[4,8]", "--json", "--out", str(tmp_path / "b"))
    record = _json(done)
    said = [line for line in done.stderr.splitlines() if "could not be captured as a graph" in line]
    assert len(said) == 1 and said[0].startswith("cudagent: ") and "ranking its modules instead" in said[0], said
    assert "(torch.export: " in said[0] and "Traceback" not in done.stderr  # the exporter's first line, not its story
    assert said[0].removeprefix("cudagent: ") in record["notes"] and "a" in _spots(record), record
    done = _run(tmp_path, f"{MODEL}:Block", "--inputs", "x=f32[2,64]", "--dtype", "f8")
    assert done.returncode == 2 and "one of float32, bfloat16, float16" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "home" / "hotspots").exists()


@pytest.mark.slow
def test_a_llama_config_saved_with_its_defaults_is_captured_and_its_attention_and_norms_become_tasks(tmp_path):
    """transformers' defaults keep the key/value cache on (use_cache), which torch.export refuses in an output; the
    forward being optimized runs with it off, in memory, and the saved config is not edited."""
    from transformers import LlamaConfig

    directory = tmp_path / "llama-tiny"
    LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=100,
        max_position_embeddings=64,
    ).save_pretrained(directory)
    saved = (directory / "config.json").read_text()
    assert json.loads(saved)["use_cache"] is True
    out = tmp_path / "r"
    args = ["--inputs", "input_ids=i64[1,16]<100", "--tasks", "20", "--json", "--out", str(out)]
    record = _json(_run(tmp_path, "--hf", str(directory), *args))
    tasks = {" ".join(k["ops"]): k["task"] for k in record["kinds"] if k["task"]}
    assert any("scaled_dot_product_attention" in ops for ops in tasks), list(tasks)
    assert any({"mean", "rsqrt"} <= set(ops.split()) for ops in tasks), list(tasks)
    assert (directory / "config.json").read_text() == saved
