"""`cudagent` as a user runs it: real processes, real exit codes, stdout holding only the result."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VADD = "tests/adversarial/tasks/vadd.py"


def cudagent(*args, env=None, timeout=900):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "cudagent", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=full_env,
        timeout=timeout,
    )


def test_help_lists_commands_and_exit_codes():
    proc = cudagent("--help")
    assert proc.returncode == 0 and "check" in proc.stdout
    sub = cudagent("check", "--help")
    assert sub.returncode == 0
    for text in ("--device", "--json", "Exit codes", "cudagent check examples/tasks/axpby.py"):
        assert text in sub.stdout, text


@pytest.mark.slow
def test_correct_cpu_candidate_json():
    proc = cudagent(
        "check",
        "examples/tasks/softmax.py",
        "examples/solutions/cpu/softmax",
        "--device",
        "cpu",
        "--json",
        "--no-timing",
    )
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)  # stdout is exactly one JSON object
    for key in (
        "correct",
        "tier",
        "violations",
        "error",
        "max_abs_error",
        "time_ms",
        "speedup_vs_eager",
        "speedup_vs_compile",
    ):
        assert key in verdict
    assert verdict["correct"] is True and verdict["tier"] == 1 and verdict["violations"] == []
    assert verdict["error"] is None and set(verdict["time_ms"]) == {"eager", "compile", "candidate"}
    seconds = verdict["seconds"]  # where the verification's time went, within it
    parts = ("verify_candidate_calls", "verify_reference_and_compare")
    assert all(seconds[p] > 0 for p in parts[1:]) and sum(seconds[p] for p in parts) <= seconds["verify"] + 0.01


def test_rejected_candidate_exits_1_with_codes():
    proc = cudagent(
        "check", VADD, "tests/adversarial/cases/try_except_fallback", "--device", "cpu", "--json", "--no-timing"
    )
    assert proc.returncode == 1
    verdict = json.loads(proc.stdout)
    assert verdict["tier"] == -1 and verdict["violations"][0]["code"] == "TRY_EXCEPT"
    assert verdict["error"].startswith("model_new.py:")


@pytest.mark.slow
def test_human_output():
    proc = cudagent("check", VADD, "tests/adversarial/cases/torch_passthrough", "--device", "cpu", "--no-timing")
    assert proc.returncode == 1
    assert proc.stdout.startswith("REJECTED (tier -1:") and "[TORCH_OP_IN_FORWARD]" in proc.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (("nope.py", "examples/solutions/cpu/axpby"), "task file nope.py does not exist"),
        (("examples/tasks/axpby.py", "nowhere"), "candidate nowhere does not exist"),
        (("examples/tasks/axpby.py", "examples"), "has no model_new.py"),
    ],
)
def test_bad_paths_exit_2_with_one_sentence(args, message):
    proc = cudagent("check", *args, "--device", "cpu")
    assert proc.returncode == 2
    assert proc.stdout == "" and proc.stderr.strip().count("\n") == 0
    assert proc.stderr.startswith("cudagent: ") and message in proc.stderr


def test_bad_task_exits_2(tmp_path):
    task = tmp_path / "task.py"
    task.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
        "def get_inputs():\n    return [1.0]\ndef get_init_inputs():\n    return []\n"
    )
    proc = cudagent("check", str(task), "examples/solutions/cpu/axpby", "--device", "cpu")
    # a number is a fine input (KernelBench passes such inputs as they are), but an output must be tensors
    assert proc.returncode == 2 and "forward must return a tensor" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_without_gpu_exits_3():
    proc = cudagent("check", "examples/tasks/axpby.py", "examples/solutions/cuda/axpby", "--device", "cuda")
    assert proc.returncode == 3 and "no CUDA GPU" in proc.stderr


@pytest.mark.slow
def test_missing_compiler_exits_3(tmp_path):
    proc = cudagent(
        "check",
        "examples/tasks/axpby.py",
        "examples/solutions/cpu/axpby",
        "--device",
        "cpu",
        env={"CXX": "/nonexistent/c++", "CUDAGENT_CACHE_DIR": str(tmp_path)},
    )
    assert proc.returncode == 3 and "no C++ compiler" in proc.stderr


def test_the_static_audit_judges_before_anything_runs(tmp_path):
    """A candidate the static audit rejects is judged before the task runs or any process starts: here the task
    would hang for ever on import, and the rejection still comes back at once."""
    task = tmp_path / "hangs.py"
    task.write_text("import time\ntime.sleep(10_000)\n" + (ROOT / VADD).read_text())
    proc = cudagent(
        "check", str(task), "tests/adversarial/cases/try_except_fallback", "--device", "cpu", "--json",
        env={"CUDAGENT_TASK_TIMEOUT_S": "600"}, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    verdict = json.loads(proc.stdout)
    assert verdict["violations"][0]["code"] == "TRY_EXCEPT" and set(verdict["seconds"]) <= {"audit", "total"}
