"""`cudagent optimize model.py:Stack`: a user's own model end to end on the CPU, driven by a scripted model server
that writes a known-good C++ kernel for whatever spot its task holds (Linear, LayerNorm, GELU): the profile, the
tasks, one episode per spot, the kernels put back and proved, the report, the review commands, and the export
applied in a fresh process."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.episodes import cli_env, cudagent, git
from tests.agent.script_server import ScriptedServer, from_list

MODEL = Path(__file__).with_name("model.py")

# The known-good C++ kernels of each module kind and ModelNew's template: the replay's (examples/replays/make.py)
MODULES = Path(__file__).resolve().parents[2] / "examples" / "replays" / "modules"
KERNELS = {kind: (MODULES / f"{kind.lower()}_cpu.cpp").read_text() for kind in ("Linear", "LayerNorm", "GELU")}
MODEL_NEW = (MODULES / "model_new.py.j2").read_text().replace("{{ call }}", "{call}").replace("{{ args }}", "{args}")


def _solve(step: int, messages: list[dict]):
    """The scripted policy: from the task's `self.op = nn.X(...)`, a C++ kernel and a ModelNew with the same
    state_dict layout; then compile, verify, profile (timed: the spot's speedups), finish."""
    task = next(m["content"] for m in messages if m["role"] == "user")
    found = re.search(r"self\.op = (nn\.(\w+)\(.*?\))(?:\.to\(.*?\))?\n", task)
    if found is None or found.group(2) not in KERNELS:
        return {"tool": "finish", "arguments": {"summary": "no kernel for this module"}}
    call, kind = found.group(1), found.group(2)
    args = "x0.contiguous()" + (", self.op.weight, self.op.bias" if kind != "GELU" else "")
    steps = [
        {
            "tool": "write_file",
            "arguments": {"path": "kernels/spot_cpu.cpp", "content": KERNELS[kind]},
        },
        {
            "tool": "write_file",
            "arguments": {"path": "model_new.py", "content": MODEL_NEW.format(call=call, args=args)},
        },
        {"tool": "compile", "arguments": {}},
        {"tool": "verify", "arguments": {}},
        {"tool": "profile", "arguments": {}},
        {"tool": "finish", "arguments": {"summary": f"{kind} in one OpenMP pass"}},
    ]
    return steps[min(step, len(steps) - 1)]


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    """One model run, shared by the tests below and by every pytest-xdist worker of the session (the first to need
    it makes it under a lock in the session's common temporary folder; the others read its record): with the
    default distribution the tests that read it land on both workers, and each made the run (two setups of 237-250 s
    measured)."""
    import fcntl
    import os

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _interrupted_and_resumed_run(tmp_path_factory.mktemp("own-model"))
    shared = tmp_path_factory.getbasetemp().parent / "own-model-run"  # every worker's basetemp is below one root
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if the run fails
        made = shared / "made.json"
        if not made.is_file():
            record, env, project, stopped = _interrupted_and_resumed_run(shared / "run")
            keep = {"CUDAGENT_HOME": env["CUDAGENT_HOME"], "OPENAI_BASE_URL": env.get("OPENAI_BASE_URL")}
            made.write_text(json.dumps({"record": record, "env": keep, "project": str(project), "stopped": stopped}))
        saved = json.loads(made.read_text())
    env = cli_env(Path(saved["env"]["CUDAGENT_HOME"]), saved["env"]["OPENAI_BASE_URL"])
    return saved["record"], env, Path(saved["project"]), saved["stopped"]


def _interrupted_and_resumed_run(root: Path):
    """Stack(dim=64, depth=2), its top 3 spots, interrupted (SIGINT, as Ctrl-C sends) in its first spot's episode
    and finished by `--resume last`, so that the run every other test reads is also the resumed one
    (`test_a_model_run_interrupted_mid_spot_resumes_from_its_record`): one run's cost, not two."""
    import os
    import signal

    root.mkdir(parents=True, exist_ok=True)
    home = root / "home"
    model = root / "project" / "model.py"  # outside any repository: the final commit goes to the run's own one
    model.parent.mkdir()
    shutil.copy2(MODEL, model)
    cli = {"proc": None, "sent": False}

    def script(step: int, messages: list[dict]):
        if step == 2 and not cli["sent"]:
            cli["sent"] = True
            os.kill(cli["proc"].pid, signal.SIGINT)
        return _solve(step, messages)

    args = ["optimize", f"{model}:Stack", "--inputs", "x=f32[4,16,64]", "--top", "3", "--device", "cpu"]
    # C++ GEMMs against MKL are slower: kept anyway, so that the put-back and the proof have kernels to work on
    args += ["--by", "modules", "--no-final-check", "--max-turns", "8", "--keep-slower", "--json"]
    with ScriptedServer(script) as server:
        env = cli_env(home, server.url)
        cli["proc"] = subprocess.Popen(
            [sys.executable, "-m", "cudagent", *args], env=env, cwd=root, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        _, interrupted = cli["proc"].communicate(timeout=900)
        stopped = {"returncode": cli["proc"].returncode, "stderr": interrupted}
        parents = [p for p in (home / "runs").iterdir() if (p / "model-run.json").is_file()]
        if len(parents) == 1:
            stopped["record"] = json.loads((parents[0] / "model-run.json").read_text())
        done = cudagent(["optimize", "--resume", "last", "--json"], env, cwd=root)
    assert done.returncode == 0, (stopped["returncode"], interrupted[-2000:], done.stderr[-3000:])
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["event"] == "model_run", done.stdout[-2000:]
    return record, env, model.parent, stopped


@pytest.mark.slow
def test_a_users_model_is_profiled_optimized_spot_by_spot_put_back_and_proved(model_run):
    record, env, root, _ = model_run
    spots = record["spots"]
    # --top 3: alike modules count once (the others' task "serves both"), and an operator of a forward that ranks among
    # them on a loaded machine (aten::softmax, "not a module") is listed but is no module to optimize
    own = [s for s in spots if s.get("modules")]
    assert len(own) == 3 and record["state"] == "done", spots
    optimized = [s for s in spots if s.get("outcome") == "kernel"]
    assert optimized, spots
    for s in optimized:  # each spot is an ordinary run, its header naming the parent and the spot
        header = json.loads((Path(env["CUDAGENT_HOME"]) / "runs" / s["run_id"] / "trajectory.jsonl").open().readline())
        assert header["parent"] == record["run_id"] and header["spot"] == s["spot"]
        assert s["tier"] >= 1 and s["put_back"]["correct"], s
    result = record["result"]
    assert result["correct"] is True and result["verification"]["inputs"] == 3, result
    assert {"eager", "patched", "compile"} <= set(result["timing"]["ms"]), result["timing"]
    assert all(s["speedup_vs_eager"] for s in optimized), optimized  # profiled: each spot's own speedup
    assert result["timing"]["speedup_vs_eager"] > 0 and result["predicted_speedup_vs_eager"] > 0
    run_dir = Path(result["package"]).parent
    report = (run_dir / "report.md").read_text()
    assert "measured" in report and "predicted by Amdahl" in report and (run_dir / "report.png").is_file()
    # the final commit holds the package, the report and its chart
    repo = record["repo"]["repo_dir"]
    files = git(repo, "show", "--name-only", "--format=%s", "HEAD").split()
    assert "report.md" in files and "report.png" in files, files
    assert any(f.endswith("spots.json") for f in files) and any(f.endswith(".cpp") for f in files), files


@pytest.mark.slow
def test_runs_log_and_show_know_the_model_run(model_run):
    record, env, _, _ = model_run
    listed = [json.loads(line) for line in cudagent(["runs", "--json"], env).stdout.splitlines()]
    parent = next(r for r in listed if r.get("kind") == "model")
    assert parent["run_id"] == record["run_id"] and parent["correct"] is True
    children = {s["run_id"] for s in record["spots"] if s.get("run_id")}
    assert children <= {r["run_id"] for r in listed}
    log = cudagent(["log", record["run_id"]], env)
    assert log.returncode == 0 and "end to end" in log.stdout and record["spots"][0]["spot"] in log.stdout, log
    shown = cudagent(["show", record["run_id"], "1", "--json"], env)
    assert json.loads(shown.stdout)["spot"] == record["spots"][0]["spot"]
    missing = cudagent(["show", record["run_id"], "9"], env)
    assert missing.returncode == 2 and "has no spot 9" in missing.stderr


@pytest.mark.slow
def test_the_export_patches_the_model_in_a_fresh_process_without_cudagent(model_run, tmp_path):
    record, env, project, _ = model_run
    dest = tmp_path / "stack_kernels"
    done = cudagent(["export", record["run_id"], str(dest)], env)
    assert done.returncode == 0, done.stderr
    assert not (dest / "_build").exists() and (dest / "spots.json").is_file()
    script = f"""
import sys, torch
sys.path[:0] = [{str(tmp_path)!r}, {str(project)!r}]
sys.modules["cudagent"] = None  # the package must need nothing from cudagent
from model import Stack
import stack_kernels
torch.manual_seed(3)
model = Stack().eval()
x = torch.randn(4, 16, 64)
expected = model(x)
replaced = stack_kernels.patch(model)
assert replaced, replaced
assert all(type(model.get_submodule(p)).__name__ == "ModelNew" for p in replaced)
torch.testing.assert_close(model(x), expected, rtol=1e-4, atol=1e-4)
print(len(replaced))
"""
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    served = sum(len(s["modules"]) for s in record["spots"] if s.get("outcome") == "kernel")
    assert int(ran.stdout.split()[-1]) == served


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["{model}:Nope", "--inputs", "x=f32[4,16,64]"], "defines no module class Nope"),
        (["{model}:Stack", "--inputs", "x=f32[4,16,63]"], "check --inputs"),
        (["{model}:Stack", "--inputs", "x=f32[4,16,64]", "--top", "0"], "--top"),
        (["{model}:Stack", "--inputs", "x=f32[4,16,64]", "--resume", "last"], "resume those"),
    ],
)
def test_bad_input_to_a_model_run_is_one_sentence_exit_2_and_nothing_made(tmp_path, args, words):
    model = tmp_path / "model.py"
    shutil.copy2(MODEL, model)
    before = model.read_bytes()
    with ScriptedServer(from_list([], after={"tool": "finish", "arguments": {"summary": "-"}})) as server:
        env = cli_env(tmp_path / "home", server.url)  # inputs that do not fit are found when the model first runs
        done = cudagent(["optimize", *[a.format(model=model) for a in args], "--device", "cpu"], env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert words in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert model.read_bytes() == before and not (tmp_path / "home" / "runs").exists()


@pytest.mark.parametrize("server", ["none", "nothing listening"])
def test_a_model_run_without_a_reachable_model_server_stops_before_profiling_with_exit_3(tmp_path, server):
    """No model server configured, or nothing listening at the address given: one sentence and exit 3 at once,
    before the model is profiled or anything is made (found by a newcomer: six retries per spot against a hosted
    API the README never named, then exit 0)."""
    import time

    model = tmp_path / "model.py"
    shutil.copy2(MODEL, model)
    env = cli_env(tmp_path / "home", None if server == "none" else "http://127.0.0.1:9/v1")
    if server == "none":
        env.pop("OPENAI_BASE_URL", None)
    started = time.monotonic()
    done = cudagent(["optimize", f"{model}:Stack", "--inputs", "x=f32[4,16,64]", "--device", "cpu"], env, cwd=tmp_path)
    took = time.monotonic() - started
    assert done.returncode == 3, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert ("no model server configured" if server == "none" else "nothing is listening") in lines[0], lines
    assert "profil" not in done.stderr and not (tmp_path / "home" / "runs").exists()
    assert took < 30, took  # no retries, no profile


@pytest.mark.slow
def test_a_model_run_whose_every_spot_fails_exits_non_zero_and_is_listed_as_failed(tmp_path):
    """The server answers the probe, then refuses every chat request (its key revoked mid-run): each spot's episode
    fails, nothing is put back, the run exits 3 and `cudagent runs` lists it as failed, in a few words."""
    model = tmp_path / "model.py"
    shutil.copy2(MODEL, model)
    refuse = {"status": 401, "body": {"error": {"message": "invalid api key", "type": "auth"}}}
    with ScriptedServer(from_list([], after=refuse)) as server:
        env = cli_env(tmp_path / "home", server.url)
        args = ["optimize", f"{model}:Stack", "--inputs", "x=f32[4,16,64]", "--device", "cpu", "--top", "1"]
        done = cudagent(args + ["--no-final-check"], env, cwd=tmp_path)
    assert done.returncode == 3, done.stderr[-3000:]
    assert "failed" in done.stderr, done.stderr[-3000:]
    listed = cudagent(["runs"], env)
    row = next(line for line in listed.stdout.splitlines() if "stack" in line.lower() and "failed" in line)
    assert "1 failed" in listed.stdout, listed.stdout
    assert len(row) <= 200, row


@pytest.mark.parametrize(
    "call",
    ["Conv1D(nf=2304, nx=768)", "nn.Linear(in_features=64, out_features=256, bias=True)", "NewGELUActivation()"]
    + ["nn.LayerNorm(normalized_shape=(768,), eps=1e-05, elementwise_affine=True, bias=True)"],
)
def test_the_gpu_scripts_modelnew_takes_the_tasks_state_dict(call, monkeypatch):
    """The GPU test's scripted ModelNew (cuda_kernels.py) must accept each task's state_dict strictly, as the
    evaluator and patch() require; checked here, on the CPU, for the modules of a GPT-2-class model."""
    import types

    import torch.nn as nn
    from transformers.activations import NewGELUActivation
    from transformers.pytorch_utils import Conv1D

    from tests.usermodel.cuda_kernels import model_new

    monkeypatch.setitem(sys.modules, "cuda_extension", types.ModuleType("cuda_extension"))
    namespace: dict = {}
    exec(model_new(call), namespace)  # noqa: S102  (our own test's source)
    reference = nn.Module()
    reference.op = eval(call, {"nn": nn, "Conv1D": Conv1D, "NewGELUActivation": NewGELUActivation})  # noqa: S307
    new = namespace["ModelNew"]()
    new.load_state_dict(reference.state_dict(), strict=True)
    assert {k: v.shape for k, v in new.state_dict().items()} == {k: v.shape for k, v in reference.state_dict().items()}


GELU_NEW = """import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.op = nn.Module()

    def forward(self, x0):
        return F.gelu(x0)
"""
HEAD_DOUBLED = """import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.op = nn.Linear(64, 64)

    def forward(self, x0):
        return self.op(x0) * 2.0  # (plus one would pass: the model takes a softmax of it)
"""


def test_a_kernel_that_breaks_the_model_is_named_and_left_out_and_the_others_are_put_back(tmp_path):
    """prove.py on a package of two spots, one of them wrong: each spot is tried alone, the wrong one is reported
    and left out, the model patched with the other matches the original."""
    from cudagent.usermodel.delivery import prove_package
    from cudagent.usermodel.modelrun import ModelRequest
    from cudagent.usermodel.package import write_package

    model = tmp_path / "model.py"
    shutil.copy2(MODEL, model)

    def spot(name, modules, source):
        return {"name": name, "modules": modules, "kind": "x", "share": 0.1, "run_id": "r", "commit": "c"} | {
            "files": {"model_new.py": source.encode()}
        }

    acts = ["blocks.0.act", "blocks.1.act"]
    package = write_package(
        [spot("blocks_0_act", acts, GELU_NEW), spot("head", ["head"], HEAD_DOUBLED)],
        tmp_path / "stack_kernels",
        "model.py:Stack",
        "test",
    )
    request = ModelRequest(target=f"{model}:Stack", inputs="x=f32[4,16,64]")
    result = prove_package(package, request, "cpu", "best-effort", tmp_path, timing=False)
    assert result["spots"]["blocks_0_act"]["correct"] is True, result
    assert result["spots"]["head"]["correct"] is False and "values differ" in result["spots"]["head"]["why"], result
    assert result["applied"] == ["blocks_0_act"] and result["correct"] is True, result
    assert result["confinement"]["level"] == "best-effort" and "timing" not in result


@pytest.mark.slow
def test_a_model_run_interrupted_mid_spot_resumes_from_its_record(model_run):
    """Ctrl-C in the first spot's episode, then `--resume last` (the shared run, model_run): the spot's own run goes
    on under its id, the next spots run, the kernels are put back and report.md is written (it used to resume the
    spot's episode alone and leave the model run interrupted for good)."""
    record, env, _, stopped = model_run
    err = stopped["stderr"]
    assert stopped["returncode"] == 130, err[-3000:]
    assert f"--resume {record['run_id']}" in err, err[-1000:]
    assert "record" in stopped, "the interrupted command left no one model run's record"
    before = stopped["record"]
    # the first spot that became a task (a forward's operator ranked above it, on a busy machine, is listed
    # with why it is not optimized, and skipped)
    first = next(s for s in before["spots"] if s.get("task"))
    assert before["state"] == "interrupted" and first["outcome"] == "interrupted" and first["run_id"], before
    assert record["run_id"] == before["run_id"] and record["state"] == "done", record
    spots = [s for s in record["spots"] if s.get("task")]
    assert spots[0]["run_id"] == first["run_id"] and spots[0]["outcome"] == "kernel", spots
    assert len(spots) >= 2 and all(s.get("run_id") for s in spots), spots
    run_dir = Path(env["CUDAGENT_HOME"]) / "runs" / record["run_id"]
    assert record["result"]["correct"] is True and (run_dir / "report.md").is_file()
