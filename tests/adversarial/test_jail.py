"""The jail (cudagent/evaluator/jail/), tried as an attacker would: one case per class of escape found on the landed
evaluator before it, each written from the attacker's side (raw system calls, no API name for the audits to find),
each run with the jail on (nothing gets out) and with the defence off (it does: the attack is real).

    1 a process that outlives its evaluation       jail/outlive
    2 the trusted build's output written           jail/tamper
    3 the build reading a private file             jail/computed_include, and load_inline's extra_include_paths
    4 a candidate switching confinement off        jail/start_failure, then the next candidate
    5 signals to a process outside                 jail/signal_sibling, and seccomp alone
    6 a neighbour's out-of-memory                  the re-run alone (here with a device that fails on cue;
                                                   on the GPU: test_jail_gpu.py)
"""

from __future__ import annotations

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
from cudagent.evaluator.jail.process import ChildProcess
from cudagent.evaluator.verify import load_message
from cudagent.resources import PACKAGE_DIR, cache_dir
from cudagent.task import load_task
from cudagent.workspace import Workspace

HERE = Path(__file__).parent
CASES = HERE / "jail"
TASK = HERE / "tasks" / "vadd.py"
CPU = resolve_device("cpu")
JAIL = jail_level.decide("best-effort", "cpu")

needs_jail = pytest.mark.skipif(
    not JAIL.jailed or JAIL.inner == "off", reason=f"needs bubblewrap and the inner layer (here: {JAIL.describe()})"
)


def workspace(tmp_path: Path, case: str, targets: dict[str, str] | None = None) -> tuple:
    """A workspace of the vadd task holding the case's kernels, the raw system calls and jail_targets.h (`targets`
    as #defines: what the attack aims at)."""
    task = load_task(TASK)
    ws = Workspace.create(tmp_path / case, task.source)
    for src in (CASES / case / "kernels").iterdir():
        shutil.copy2(src, ws.kernels_dir / src.name)
    shutil.copy2(CASES / "raw_syscalls.h", ws.kernels_dir / "raw_syscalls.h")
    lines = [f"#define {k} {v}" for k, v in (targets or {}).items()]
    (ws.kernels_dir / "jail_targets.h").write_text("\n".join(lines) + "\n")
    shutil.copy2(CASES / case / "model_new.py", ws.model_new_py)
    return task, ws


def evaluate(task, ws, level: str = "best-effort", **options):
    opts = EvalOptions(timing=False, confine=level, stock_trials=1, **options)
    with Evaluator(task, CPU, opts) as ev:
        return ev.evaluate(ws)


def without_a_jail(task, ws) -> dict:
    """The defence off: the candidate built as the evaluator builds it, then loaded and called once in a process
    with no jail at all (no keeper, no bubblewrap, no inner layer), as every candidate process was started before."""
    with Evaluator(task, CPU, EvalOptions(timing=False, confine="off")) as ev:
        handin = ev.cell().handin()
        handin.put("model_new.py", ws.model_new_py.read_text())
        assert ev.build(ws, handin).ok
        ref = task.build_model(1, "cpu")
        with ChildProcess(device="cpu") as child:
            reply = child.request(load_message(task, handin.inside, CPU, ref), timeout_s=120)
            if reply.get("ok"):
                reply = child.request({"op": "call", "inputs": task.make_inputs(2, "cpu")}, timeout_s=120)
        handin.remove()
        return reply


def processes_named(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() == name:
                    found.append(int(entry))
        except (OSError, ValueError):
            pass
    return found


def wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# ----- 1: processes that outlive an evaluation ----------------------------------------------------------------------


@pytest.mark.slow
@needs_jail
@pytest.mark.parametrize("fork_server", [True, False])
def test_a_double_forked_setsid_process_ends_with_its_evaluation(tmp_path, fork_server):
    token = "cg" + secrets.token_hex(6)
    task, ws = workspace(tmp_path, "outlive", {"JAIL_TOKEN": f'"{token}"'})
    v = evaluate(task, ws, fork_server=fork_server)
    assert v.correct, v.summary()
    assert v.confinement["jail"]["tree"] == "namespace", v.confinement
    assert processes_named(token) == [], "a process of the candidate's outlived its evaluation"

    # The defence off: the same candidate in a process of no jail leaves its grandchild running.
    reply = without_a_jail(task, ws)
    try:
        assert reply.get("ok"), reply
        assert wait_for(lambda: processes_named(token)), "the attack did not leave a process behind: it is not real"
    finally:
        for pid in processes_named(token):
            os.kill(pid, signal.SIGKILL)


def test_without_bubblewrap_a_subreaper_ends_the_orphans(tmp_path):
    """The keeper's other mode (machines without bubblewrap): orphans come back to it and are killed."""
    token = "cg" + secrets.token_hex(6)
    script = tmp_path / "orphan.py"
    script.write_text(
        "import ctypes, os, sys, time\n"
        "import cudagent.evaluator.jail.keeper as keeper\n"
        "keeper.keep('subreaper')\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        ctypes.CDLL(None).prctl(15, b'{token}')\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "print('left', flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_DIR.parent)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and "left" in done.stdout, done.stderr
    assert processes_named(token) == []


# ----- 2: the trusted build's output, written by the candidate ------------------------------------------------------


@pytest.mark.slow
@needs_jail
def test_a_candidate_cannot_change_its_library_its_hand_in_or_plant_code(tmp_path):
    token = secrets.token_hex(6)
    plant_dirs = [cache_dir() / "builds", cache_dir() / "objects", PACKAGE_DIR.parent, Path.home()]
    dirs = ", ".join(f'"{d}"' for d in plant_dirs)
    task, ws = workspace(tmp_path, "tamper")
    (ws.kernels_dir / "jail_targets.h").write_text(
        f'#define JAIL_TOKEN "{token}"\nstatic const char* JAIL_PLANT_DIRS[] = {{{dirs}}};\n'
    )
    planted = lambda: [str(p) for d in plant_dirs for p in d.glob(f"sitecustomize-{token}-*")]  # noqa: E731
    v = evaluate(task, ws)
    assert v.correct, f"the candidate wrote what it must not:\n{v.summary()}"
    assert planted() == []
    library = ws.build_dir / "cuda_extension.so"  # the trusted build's own copy: never handed in
    built = library.read_bytes()

    # The defence off (--confine off: no bubblewrap, no Landlock): the hand-in's seal is undone by its owner.
    loose = evaluate(task, ws, level="off")
    try:
        assert not loose.correct and "OUTPUT_MISMATCH" in loose.codes, loose.summary()
        assert planted(), "no sitecustomize was planted with the defence off: the attack is not real"
        assert loose.max_abs_error >= 4, loose.max_abs_error  # the library, a file and a link beside it, the move
    finally:
        for p in planted():
            os.unlink(p)
    assert library.read_bytes() == built


# ----- 3: the build reading what a source asks for ------------------------------------------------------------------


@pytest.mark.slow
@needs_jail
def test_a_computed_include_of_a_private_file_comes_back_with_nothing(tmp_path):
    # An identifier: gcc names it in the error itself, not only in the source excerpt under it (which one CI-like
    # run on a loaded machine did not carry; the cause was not found)
    token = "cudagent_secret_" + secrets.token_hex(6)
    private = tmp_path / "private" / "id_secret"
    private.parent.mkdir()
    private.write_text(f"{token} is the first line of a private file\n")
    private.chmod(0o600)
    task, ws = workspace(tmp_path, "computed_include", {"JAIL_SECRET": f'"{private}"'})
    v = evaluate(task, ws)
    assert "BUILD_FAILED" in v.codes, v.summary()
    assert token not in v.summary(detail=True) and token not in str(v.build), "a private file came back"
    assert "No such file" in v.build["errors"], v.build["errors"]

    loose = evaluate(task, ws, level="off")  # the defence off: the build runs unjailed
    assert token in loose.build["errors"], f"the private file did not come back with the defence off:\n{loose.build}"


def test_extra_include_paths_outside_the_toolchain_are_refused(tmp_path):
    from cudagent.evaluator.toolchain.inline import InlineSpec, build

    secret = tmp_path / "secrets"
    secret.mkdir()
    (secret / "key.h").write_text("private\n")
    spec = InlineSpec.of_call(
        (),
        {
            "name": "leak",
            "cpp_sources": '#include "key.h"\nint f() { return 1; }',
            "functions": ["f"],
            "extra_include_paths": [str(secret)],
        },
    )
    built = build(spec, CPU, 60, JAIL)
    assert not built.ok and "extra_include_paths may only name folders of the toolchain" in built.errors
    assert "private" not in built.errors and "private" not in built.log


@pytest.mark.slow  # more than a few seconds (the inner loop leaves it out)
def test_a_build_gets_no_key_of_the_users(tmp_path, monkeypatch):
    """A computed include of /proc/self/environ prints the compiler's own environment: it holds no key."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cudagent-test-" + secrets.token_hex(6))
    task = load_task(TASK)
    ws = Workspace.create(tmp_path / "environ", task.source)
    (ws.kernels_dir / "env.cpp").write_text('#define E "/proc/self/environ"\n#include E\n')
    shutil.copy2(CASES / "outlive" / "model_new.py", ws.model_new_py)
    v = evaluate(task, ws)
    assert "BUILD_FAILED" in v.codes and "sk-cudagent-test-" not in v.build["errors"], v.build["errors"]


# ----- 4: a candidate that switches confinement off for the next -------------------------------------------------


@pytest.mark.slow
@needs_jail
def test_a_failing_candidate_process_weakens_nothing_after_it(tmp_path):
    """The level is the machine's, decided by a trusted probe before any candidate: a candidate process that ends
    as an unconfinable one would (status 79) is a crash of its own, and the next candidate of the same evaluator is
    jailed as the first was."""
    task, bad = workspace(tmp_path, "start_failure")
    _, good = workspace(tmp_path, "outlive", {"JAIL_TOKEN": '"cgstartfail"'})
    with Evaluator(task, CPU, EvalOptions(timing=False, stock_trials=1)) as ev:
        failed = ev.evaluate(bad)
        assert "CRASHED" in failed.codes and not failed.correct, failed.summary()
        after = ev.evaluate(good)
    assert after.correct, after.summary()
    assert after.confinement["confined"] and after.confinement["jail"] == JAIL.to_dict(), after.confinement
    assert not any("unconfined" in n for n in after.notes), after.notes


# ----- 5: signals ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_jail
def test_a_candidate_cannot_signal_a_process_outside_its_evaluation(tmp_path):
    sibling = subprocess.Popen(["sleep", "120"])
    try:
        task, ws = workspace(tmp_path, "signal_sibling", {"JAIL_SIBLING": str(sibling.pid)})
        v = evaluate(task, ws)
        assert v.correct and sibling.poll() is None, v.summary()
        reply = without_a_jail(task, ws)  # the defence off
        assert reply.get("ok") and wait_for(lambda: sibling.poll() is not None), "the sibling survived: not real"
    finally:
        sibling.kill()
        sibling.wait()


@pytest.mark.skipif(JAIL.inner == "off", reason="needs seccomp")
@pytest.mark.parametrize("filtered", [True, False])
def test_seccomp_alone_refuses_signals_to_another_process(tmp_path, filtered):
    """The inner layer's seccomp filter, on its own (no Landlock, no jail): kill() reaches only the process
    itself; without the filter (the control) the same call kills the sibling."""
    script = tmp_path / "signals.py"
    script.write_text(
        "import os, signal, subprocess, sys\n"
        "import cudagent.evaluator.jail.confine as c, cudagent.evaluator.jail.privileges as p\n"
        "sibling = subprocess.Popen(['sleep', '60'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(sibling.pid)\n"
        "p.drop_privileges()\n"
        f"if {filtered}:\n"
        "    notes = []\n"
        "    assert c._seccomp(c._libc(), notes), notes\n"
        "os.kill(os.getpid(), 0)\n"
        "try:\n"
        "    os.kill(sibling.pid, signal.SIGKILL)\n"
        "    print('killed')\n"
        "except PermissionError:\n"
        "    print('refused')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_DIR.parent)}
    done = subprocess.run([sys.executable, "-s", str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    pid, said = done.stdout.split()
    assert said == ("refused" if filtered else "killed")
    if filtered:
        os.kill(int(pid), signal.SIGKILL)


# ----- 6: a neighbour's out-of-memory -------------------------------------------------------------------------------


def test_an_out_of_memory_beside_others_is_evaluated_again_alone(monkeypatch):
    """The evaluator's rule, on a device that runs out of memory on cue: a verdict that failed for want of device
    memory while the device was shared is not the verdict; the evaluation runs again holding the device alone, and
    a failure that happens alone too (the candidate's own hunger) stands."""
    import dataclasses

    from cudagent.device import share
    from cudagent.evaluator.verdict import Verdict

    ev = Evaluator.__new__(Evaluator)  # the rule alone: no process, no task
    ev.device = dataclasses.replace(CPU, kind="cuda")
    runs = []

    def run(ws, timing):
        alone = share.alone()
        runs.append(alone)
        v = Verdict(task={}, device={})
        v.correct = True
        if not alone:
            v.reject("FORWARD_RAISED", "[stock-1] RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
        return v

    monkeypatch.setattr(ev, "_evaluate", run)
    # the candidate's next process starts its device with the device held alone too (GPU: test_jail_gpu.py)
    monkeypatch.setattr(ev, "_ready_alone", lambda: runs.append("ready alone" if share.alone() else "ready"))
    v = ev.evaluate(None)
    assert runs == [False, "ready alone", True] and v.correct and v.codes == [], (runs, v.codes)
    assert "evaluated again with the device alone" in v.notes[-1]

    runs.clear()
    monkeypatch.setattr(ev, "_evaluate", lambda ws, timing: runs.append(share.alone()) or _oom())
    v = ev.evaluate(None)
    assert runs == [False, "ready alone", True] and "FORWARD_RAISED" in v.codes  # alone too: its own failure


def _oom():
    from cudagent.evaluator.verdict import Verdict

    v = Verdict(task={}, device={})
    v.reject("FORWARD_RAISED", "[stock-1] torch.OutOfMemoryError: CUDA out of memory")
    return v
