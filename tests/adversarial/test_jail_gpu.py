"""The jail on the GPU (the CPU cases are test_jail.py): what the CUDA driver, CUPTI and nvcc need inside it, and the
two classes of the jail's issue that only a GPU shows.

    4  a candidate leaves a process behind that takes the GPU's memory, so that the next candidate process cannot
       start CUDA: jailed, the process dies with its evaluation and the next candidate runs jailed as the first;
       with no jail (the defence off) it lives on, holds the memory, and the next candidate still runs jailed (its
       failure is its own)
    6  a candidate that fills the GPU beside honest evaluations (separate `cudagent check` processes sharing the
       device as a bench's or a service's do): every honest verdict is correct, evaluated again alone where it ran
       out of memory beside the hog, whether the task's check runs then or was kept from an earlier evaluation
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cudagent.evaluator.jail.level as jail_level
from cudagent.device.info import resolve_device
from cudagent.evaluator import EvalOptions, Evaluator
from cudagent.task import load_task
from cudagent.workspace import Workspace
from tests.adversarial.test_jail import TASK, workspace

ROOT = Path(__file__).resolve().parents[2]
HONEST = ("softmax", "layernorm", "axpby")


def gpu_memory_used() -> float:
    """The share of the GPU's memory in use, as nvidia-smi reports it."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
    ).stdout.split(",")
    return float(out[0]) / float(out[1])


def holders(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            pass
    return found


def honest_workspace(tmp_path: Path, name: str):
    task = load_task(ROOT / "examples" / "tasks" / f"{name}.py")
    ws = Workspace.create(tmp_path / name, task.source)
    solution = ROOT / "examples" / "solutions" / "cuda" / name
    shutil.copytree(solution / "kernels", ws.kernels_dir, dirs_exist_ok=True)
    shutil.copy2(solution / "model_new.py", ws.model_new_py)
    return task, ws


def test_the_jail_holds_on_this_gpu():
    jail = jail_level.decide("best-effort", "cuda")
    print(jail.describe(), jail.to_dict())
    assert jail.jailed and jail.tree == "namespace" and jail.inner != "off", jail


@pytest.mark.serial  # it takes the GPU's memory: alone
def test_a_leftover_process_holding_the_gpu_weakens_nothing(tmp_path):
    token = "cudagent-holder-" + secrets.token_hex(6)
    targets = {"JAIL_TOKEN": f'"{token}"', "JAIL_PYTHON": f'"{sys.executable}"'}
    task, ws = workspace(tmp_path / "attack", "gpu_leftover", {**targets, "JAIL_LEAVE": "1"})
    _, honest = workspace(tmp_path / "control", "gpu_leftover", {**targets, "JAIL_LEAVE": "0"})
    cuda = resolve_device("cuda")
    try:
        with Evaluator(task, cuda, EvalOptions(timing=False, stock_trials=1)) as ev:
            first = ev.evaluate(ws)
            print("leftover, jailed:", first.summary(), first.confinement)
            assert first.correct, first.summary()
            time.sleep(1.0)
            assert holders(token) == [], "the holder outlived its evaluation"
            after = ev.evaluate(honest)
            print("the next candidate:", after.summary(), after.confinement)
            assert after.correct and after.confinement["confined"], after.summary()
            assert after.confinement["jail"] == first.confinement["jail"]

        # The defence off: the same candidate in a process with no jail leaves the holder alive with the memory.
        reply = _without_a_jail_on(task, ws, cuda)
        deadline = time.monotonic() + 60
        while not (holders(token) and gpu_memory_used() > 0.8) and time.monotonic() < deadline:
            time.sleep(0.5)
        print("with no jail:", reply.get("ok"), "holders", holders(token), f"memory used {gpu_memory_used():.0%}")
        assert holders(token) and gpu_memory_used() > 0.8, "the holder did not take the GPU: the attack is not real"
        with Evaluator(task, cuda, EvalOptions(timing=False, stock_trials=1)) as ev:
            beside = ev.evaluate(honest)
        print("the next candidate beside the holder:", beside.summary(), beside.confinement, beside.notes)
        assert not any("unconfined" in n for n in beside.notes)
        if beside.confinement is not None:
            assert beside.confinement["jail"] == first.confinement["jail"]
    finally:
        for pid in holders(token):
            os.kill(pid, signal.SIGKILL)


def _without_a_jail_on(task, ws, device) -> dict:
    from cudagent.evaluator.jail.process import ChildProcess
    from cudagent.evaluator.verify import load_message

    with Evaluator(task, device, EvalOptions(timing=False, confine="off")) as ev:
        handin = ev.cell().handin()
        handin.put("model_new.py", ws.model_new_py.read_text())
        assert ev.build(ws, handin).ok
        with ChildProcess(device="cuda") as child:
            msg = load_message(task, handin.inside, device, task.build_model(1, "cuda"))
            reply = child.request(msg, timeout_s=120)
            if reply.get("ok"):
                reply = child.request({"op": "call", "inputs": task.make_inputs(2, "cpu")}, timeout_s=120)
        handin.remove()
        return reply


@pytest.mark.serial  # it fills the GPU: nothing else of the test run may be beside it
def test_a_candidate_that_fills_the_gpu_changes_no_neighbours_verdict(tmp_path):
    task, hog = workspace(tmp_path, "gpu_hog")
    env = {**os.environ, "CUDAGENT_DEVICE_LOCK": str(tmp_path / "gpu.lock"), "PYTHONPATH": str(ROOT)}
    check = [sys.executable, "-m", "cudagent", "check"]
    # One honest task was checked before on this machine (its check is recalled, checked_tasks.py): its process's
    # start meets the full GPU first; the others' checks run and meet it there.
    recalled = HONEST[-1]
    t, ws = honest_workspace(tmp_path / "before", recalled)
    argv = [*check, str(ROOT / "examples" / "tasks" / f"{recalled}.py"), str(ws.root), "--json", "--no-timing"]
    subprocess.run(argv, env=env, capture_output=True, check=True, timeout=600)
    hogging = subprocess.Popen(
        [*check, str(TASK), str(hog.root), "--json", "--no-timing"], env=env, stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 240
    while gpu_memory_used() < 0.9 and time.monotonic() < deadline and hogging.poll() is None:
        time.sleep(0.2)
    print(f"the hog holds {gpu_memory_used():.0%} of the GPU's memory")
    honest = []
    for name in HONEST:
        t, ws = honest_workspace(tmp_path, name)
        argv = [*check, str(ROOT / "examples" / "tasks" / f"{name}.py"), str(ws.root), "--json", "--no-timing"]
        honest.append((name, subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)))
    verdicts = {}
    for name, proc in honest:
        out, _ = proc.communicate(timeout=900)
        verdicts[name] = json.loads(out)
    hog_out, _ = hogging.communicate(timeout=900)
    hog_verdict = json.loads(hog_out)
    print("hog:", hog_verdict["correct"], [v["code"] for v in hog_verdict["violations"]], hog_verdict["notes"])
    for name, v in verdicts.items():
        print(name, v["correct"], [x["code"] for x in v["violations"]], [n for n in v["notes"] if "again" in n])
    assert all(v["correct"] for v in verdicts.values()), {n: v["violations"] for n, v in verdicts.items()}
