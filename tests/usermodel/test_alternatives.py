"""What the proof times beside the kernels (cudagent/usermodel/alternatives.py): the modes a user can ask for, the
strongest compile mode as the bar, Liger Kernel's patch confined to its own copy of the model."""

from __future__ import annotations

import types

import pytest
import torch

from cudagent.usermodel.alternatives import Swapped, compile_modes, key, liger, normalize, prepared
from tests.test_bad_input import run_cli


def test_modes_are_torch_compiles_own_and_compile_is_its_default():
    assert normalize("compile") == "default" and normalize("auto") == "auto"
    with pytest.raises(ValueError, match="reduce-overhead"):
        normalize("fast")
    assert compile_modes("cpu") == ("default",)  # CUDA graphs need a GPU
    assert compile_modes("cuda:0") == ("default", "reduce-overhead", "max-autotune")
    assert [key(m) for m in compile_modes("cuda")] == ["compile", "compile_reduce_overhead", "compile_max_autotune"]
    model = torch.nn.Linear(4, 4)
    assert prepared(model, "eager", (torch.randn(2, 4),), {}) is model


def test_a_patch_of_the_models_module_is_in_place_only_while_its_copy_runs():
    """Liger Kernel replaces functions of the model's module (transformers' modeling_llama.apply_rotary_pos_emb):
    the original model, timed in the same process, must keep computing what it did."""
    module = types.ModuleType("modeling_thing")
    module.rotate = lambda x: x + 1
    original = module.rotate
    seen = []
    patched = Swapped(lambda x: seen.append(module.rotate(x)), module, {"rotate": lambda x: x * 10})
    patched(3)
    assert seen == [30] and module.rotate is original
    with pytest.raises(ZeroDivisionError):  # restored when the call fails too
        Swapped(lambda: 1 / 0, module, {"rotate": None})()
    assert module.rotate is original


def test_liger_is_offered_only_where_it_applies():
    variant, why = liger(torch.nn.Linear(4, 4))
    assert variant is None and why == "not a transformers model"


def test_an_unknown_mode_is_one_sentence_and_exit_2(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("import torch\n\nclass Net(torch.nn.Linear):\n    pass\n")
    proc = run_cli(["optimize", f"{model}:Net", "--inputs", "x=f32[2,4]", "--mode", "fast"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "max-autotune" in proc.stderr and "Traceback" not in proc.stderr
