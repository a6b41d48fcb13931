"""Bad task files given to the commands a user runs: each is one clear sentence on stderr and a defined exit code,
with nothing created (no run, no branch) and nothing of the user's touched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOLUTION = REPO / "examples" / "solutions" / "cpu" / "axpby"

RELU_NO_PARAMETERS = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
"""

BAD = {
    # name: (file contents (str or bytes), exit code, words of the sentence)
    "syntax": ("class Model(:\n", 2, "syntax error"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00binary", 2, "is not UTF-8 text"),
    "empty": ("", 2, "does not define Model, get_inputs, get_init_inputs"),
    "huge": ("# " + "x" * 1_100_000 + "\n", 2, "over 1000000 bytes is not accepted"),
    "missing_import": ("import flash_attn_nonexistent\n" + RELU_NO_PARAMETERS, 2, "which is not installed"),
    "needs_cuda": (
        RELU_NO_PARAMETERS.replace("torch.randn(64)", "torch.randn(64, device='cuda')"),
        3,
        "needs a CUDA GPU",
    ),
    "hangs": ("import time\ntime.sleep(10_000)\n" + RELU_NO_PARAMETERS, 2, "did not load and run within 5 s"),
    "forward_raises": (
        RELU_NO_PARAMETERS.replace("torch.relu(x)", "x @ x.T @ torch.ones(3)"),
        2,
        "raised RuntimeError",
    ),
}


def run_cli(args, tmp_path, task_timeout_s: int = 5) -> subprocess.CompletedProcess:
    """`cudagent ARGS`; a task gets `task_timeout_s` to load and run (short: the files here that hang need not wait
    for the default)."""
    env = dict(os.environ, CUDAGENT_HOME=str(tmp_path / "home"), PYTHONWARNINGS="ignore")
    env["CUDAGENT_TASK_TIMEOUT_S"] = str(task_timeout_s)
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # never reached: the task is checked first
    return subprocess.run(
        [sys.executable, "-m", "cudagent", *args], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )


def write(tmp_path: Path, name: str, contents) -> Path:
    path = tmp_path / f"{name}.py"
    if isinstance(contents, bytes):
        path.write_bytes(contents)
    else:
        path.write_text(contents)
    return path


# every kind through `check`; through `optimize` (which shares the loading) the ones that run code
CASES = [("check", kind) for kind in sorted(BAD)] + [
    ("optimize", kind) for kind in ("syntax", "needs_cuda", "hangs", "missing_import")
]
CASES = [pytest.param(*c, marks=pytest.mark.slow) if c[1] == "hangs" else c for c in CASES]  # 5 s of waiting each


@pytest.mark.parametrize(("command", "kind"), CASES)
def test_bad_task_is_one_sentence_and_an_exit_code(tmp_path, kind, command):
    contents, code, words = BAD[kind]
    task = write(tmp_path, kind, contents)
    before = task.read_bytes()
    args = ["check", str(task), str(SOLUTION)] if command == "check" else ["optimize", str(task)]
    proc = run_cli([*args, "--device", "cpu"], tmp_path)
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and words in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert task.read_bytes() == before
    runs = tmp_path / "home" / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "a run was created for a bad task"


def test_a_model_without_parameters_is_a_good_task(tmp_path):
    """Many KernelBench tasks (activations, losses) have no parameters and no init inputs."""
    task = write(tmp_path, "relu", RELU_NO_PARAMETERS)
    proc = run_cli(["check", str(task), str(tmp_path / "missing-candidate"), "--device", "cpu"], tmp_path)
    # the task loads; what fails is the candidate path, with its own sentence
    assert proc.returncode == 2 and "missing-candidate" in proc.stderr and "relu.py" not in proc.stderr
    from cudagent.task import load_task, validate_task

    out = validate_task(load_task(task), "cpu")
    assert tuple(out.shape) == (64,)


@pytest.mark.slow  # more than a few seconds (the inner loop leaves it out)
def test_a_cuda_solution_checked_on_a_cpu_build_is_refused_before_compiling(tmp_path):
    """The README's GPU example checked on a laptop: the solution's C++ includes CUDA headers, which a CPU build
    cannot compile (found by a newcomer: 46 s of compiling before the sentence). Refused at once, naming the file
    and the header."""
    import time

    task = REPO / "examples" / "tasks" / "softmax.py"
    solution = REPO / "examples" / "solutions" / "cuda" / "softmax"
    started = time.monotonic()
    # a real task, whose check took more than 5 s on a loaded machine: the default limit
    proc = run_cli(["check", str(task), str(solution), "--device", "cpu", "--no-timing"], tmp_path, task_timeout_s=300)
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "but this is a CPU build" in proc.stderr + proc.stdout and "includes <" in proc.stderr + proc.stdout
    assert took < 40, took  # loading torch and the task, no compiler
