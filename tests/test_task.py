"""Task files: a usable one loads and validates; each kind of unusable one is one clear sentence (TaskError)."""

import subprocess
import sys
import textwrap

import pytest

from cudagent.errors import ExitCode, TaskError
from cudagent.task import load_task, randomized_state, validate_task

GOOD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.lin = nn.Linear(8, k)
    def forward(self, x):
        return torch.relu(self.lin(x))

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return [3]
"""


def write(tmp_path, text, name="task.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_a_good_task_validates(tmp_path):
    task = load_task(write(tmp_path, GOOD))
    out = validate_task(task, "cpu")
    assert tuple(out.shape) == (4, 3)
    assert task.name == "task" and len(task.sha256) == 64


def test_same_seed_gives_same_weights_and_inputs(tmp_path):
    task = load_task(write(tmp_path, GOOD))
    a, b = task.build_model(5, "cpu"), task.build_model(5, "cpu")
    assert all((p == q).all() for p, q in zip(a.parameters(), b.parameters()))
    assert not all((p == q).all() for p, q in zip(a.parameters(), task.build_model(6, "cpu").parameters()))
    assert (task.make_inputs(1, "cpu")[0] == task.make_inputs(1, "cpu")[0]).all()


BAD = {
    "missing name": ("del get_init_inputs", "does not define get_init_inputs"),
    "syntax error": ("def broken(:\n    pass", "syntax error"),
    "unfit input": ("def get_inputs():\n    return [torch.randn(4, 8), object()]", "item 1 is a builtins.object"),
    "reference raises": ("Model.forward = lambda self, x: x.reshape(5, 5)", "raised RuntimeError"),
    "nondeterministic": ("Model.forward = lambda self, x: self.lin(x) + torch.rand(4, 3)", "must be deterministic"),
    "dropout in training": (
        "class Model(nn.Module):\n    def __init__(self, k):\n        super().__init__()\n"
        "        self.d = nn.Dropout(0.5)\n    def forward(self, x):\n"
        "        return nn.functional.dropout(x, 0.5, training=True)",
        "must be deterministic",
    ),
    "missing module": ("import definitely_not_installed_mod", "imports 'definitely_not_installed_mod'"),
    "not a module": ("Model = 3", "Model must be a subclass of torch.nn.Module"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_unusable_tasks_fail_with_one_sentence(tmp_path, kind):
    extra, expected = BAD[kind]
    task = load_task(write(tmp_path, GOOD + "\n" + extra + "\n"))
    with pytest.raises(TaskError) as info:
        validate_task(task, "cpu")
    message = info.value.message
    assert expected in message
    assert "\n" not in message and "Traceback" not in message
    assert info.value.exit_code == ExitCode.USAGE


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TaskError, match="does not exist"):
        load_task(tmp_path / "nope.py")
    with pytest.raises(TaskError, match="not a file"):
        load_task(tmp_path)


def test_randomized_state_changes_every_float_and_keeps_structure(tmp_path):
    task = load_task(
        write(tmp_path, GOOD.replace("nn.Linear(8, k)", "nn.Sequential(nn.Linear(8, k), nn.BatchNorm1d(k))"))
    )
    model = task.build_model(0, "cpu")
    state = randomized_state(model, seed=1)
    assert state.keys() == model.state_dict().keys()
    for key, value in model.state_dict().items():
        if value.is_floating_point():
            assert not (state[key] == value).all(), key
        else:
            assert (state[key] == value).all(), key  # num_batches_tracked keeps its value
    assert (state["lin.1.running_var"] > 0).all()  # variances stay positive


BIG = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.proj = nn.Linear(n, 2 * n)

    def forward(self, x):
        return torch.relu(self.proj(x))

def get_inputs():
    return [torch.rand(1 << 20, 4096)]  # 16 GiB: drawn on the meta device, it takes no memory

def get_init_inputs():
    return [4096]
"""


def test_a_tasks_sizes_come_from_the_meta_device_without_memory(tmp_path):
    sizes = load_task(write(tmp_path, BIG)).sizes_on_meta()
    assert sizes.inputs == (1 << 20) * 4096 * 4 and sizes.output == 2 * sizes.inputs
    assert sizes.params == (4096 * 8192 + 8192) * 4
    named = BIG.replace("torch.rand(1 << 20, 4096)", "torch.rand(4, 4096, device='cpu')")
    assert load_task(write(tmp_path, named, "named.py")).sizes_on_meta() is None  # names a device: unknown
    no_meta = BIG.replace("return torch.relu(self.proj(x))", "return torch.relu(self.proj(x)).cpu().numpy()")
    sizes = load_task(write(tmp_path, no_meta, "no_meta.py")).sizes_on_meta()
    assert sizes.output == sizes.inputs  # an output that cannot be found counts as large as the inputs


def test_the_inputs_sizes_alone_run_no_forward(tmp_path):
    """Baselines.one_at_a_time needs only the inputs' bytes: no forward runs (a first forward on the meta device
    imports torch._dynamo, a second of CPU in every evaluating process)."""
    raising = BIG.replace("return torch.relu(self.proj(x))", "raise RuntimeError('forward ran')")
    sizes = load_task(write(tmp_path, raising)).sizes_on_meta(output=False)
    assert sizes.inputs == (1 << 20) * 4096 * 4 and sizes.output == 0
    assert load_task(write(tmp_path, raising, "again.py")).sizes_on_meta().output == sizes.inputs  # it ran: raised
    script = f"""
import sys
from pathlib import Path
from cudagent.task import load_task
load_task(Path({str(tmp_path / "again.py")!r})).sizes_on_meta(output=False)
print("torch._dynamo" in sys.modules)
"""
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert ran.stdout.split() == ["False"], ran.stderr[-2000:]
