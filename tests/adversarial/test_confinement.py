"""The candidate's process is confined (cudagent/evaluator/jail/confine.py): a kernel that tries to get out with raw
system calls, at load and in every call, gets nowhere, and the same kernel unconfined shows that each attempt is
real.

The attempts (confinement/kernels/escape.cpp): plant a file in the user's $HOME, in the compiler cache, the
precompiled headers, the baseline cache and the link-audit facts; read another session's scratch; read another
process's /proc (its command line, its memory) and ptrace it; open a TCP connection and connect to an abstract
Unix socket, both to listeners this test holds. Each success adds 1 to the output, and most leave a trace the
test looks for.
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import cudagent.evaluator.jail.level as jail_level
from cudagent.device.info import resolve_device
from cudagent.evaluator import EvalOptions, Evaluator
from cudagent.evaluator.jail.confine import machine_support
from cudagent.resources import cache_dir
from cudagent.task import load_task
from cudagent.workspace import Workspace

HERE = Path(__file__).parent
PROBE = HERE / "confinement"
CACHES = ("objects", "pch", "baselines", "link-baseline", "checked-tasks")

SUPPORT = machine_support()


def torch_has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


needs_confinement = pytest.mark.skipif(
    platform.machine() != "x86_64" or SUPPORT["landlock_abi"] < 6 or not SUPPORT["seccomp"],
    reason=f"needs x86_64 with Landlock ABI 6+ and seccomp (here: {platform.machine()}, {SUPPORT})",
)


class Targets:
    """What the probe aims at, and how to tell afterwards whether it got there."""

    def __init__(self, scratch: Path):
        self.token = secrets.token_hex(6)
        self.plant_dirs = [Path.home()] + [cache_dir() / name for name in CACHES]
        for d in self.plant_dirs:
            d.mkdir(parents=True, exist_ok=True)
        other = scratch / "other-session"
        other.mkdir(exist_ok=True)
        self.secret = other / "secret.txt"
        self.secret.write_text("another session's kernel")
        self.sibling = subprocess.Popen(["sleep", "600"])
        with open(f"/proc/{self.sibling.pid}/maps") as f:
            self.sibling_addr = int(f.readline().split("-")[0], 16)
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(8)
        self.tcp.setblocking(False)
        self.abstract = socket.socket(socket.AF_UNIX)
        self.abstract_name = f"cudagent-escape-{self.token}"
        self.abstract.bind("\0" + self.abstract_name)
        self.abstract.listen(8)
        self.abstract.setblocking(False)

    def header(self, secret: Path | None = None) -> str:
        dirs = ", ".join(f'"{d}"' for d in self.plant_dirs)
        return (
            f'#define ESCAPE_TOKEN "{self.token}"\n'
            f"static const char* ESCAPE_PLANT_DIRS[] = {{{dirs}}};\n"
            f'#define ESCAPE_SECRET "{secret or self.secret}"\n'
            f"#define ESCAPE_SIBLING {self.sibling.pid}\n"
            f"#define ESCAPE_SIBLING_ADDR {self.sibling_addr}UL\n"
            f"#define ESCAPE_TCP_PORT {self.tcp.getsockname()[1]}\n"
            f'#define ESCAPE_ABSTRACT_NAME "{self.abstract_name}"\n'
        )

    def traces(self) -> list[str]:
        """Every attempt that left a mark."""
        found = [str(p) for d in self.plant_dirs for p in d.glob(f"cudagent-plant-{self.token}-*")]
        for name, listener in (("tcp", self.tcp), ("abstract", self.abstract)):
            try:
                conn, _ = listener.accept()
                conn.close()
                found.append(f"a {name} connection")
            except BlockingIOError:
                pass
        return found

    def close(self) -> None:
        for d in self.plant_dirs:
            for p in d.glob(f"cudagent-plant-{self.token}-*"):
                p.unlink()
        self.sibling.kill()
        self.sibling.wait()
        self.tcp.close()
        self.abstract.close()


@pytest.fixture(scope="module")
def probe_workspace(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("confinement")
    targets = Targets(scratch)
    task = load_task(HERE / "tasks" / "vadd.py")
    ws = Workspace.create(scratch / "session-ws", task.source)
    shutil.copy2(PROBE / "kernels" / "escape.cpp", ws.kernels_dir / "escape.cpp")
    (ws.kernels_dir / "escape_targets.h").write_text(targets.header())
    shutil.copy2(PROBE / "model_new.py", ws.model_new_py)
    yield task, ws, targets
    targets.close()


def _evaluate(task, ws, level: str):
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=False, confine=level, stock_trials=1)) as ev:
        return ev.evaluate(ws)


@pytest.mark.slow
@needs_confinement
def test_a_confined_candidate_gets_nowhere_and_unconfined_it_would_have(probe_workspace):
    task, ws, targets = probe_workspace
    confined = _evaluate(task, ws, "best-effort")
    assert confined.confinement["confined"], confined.confinement
    assert confined.correct, f"an escape attempt succeeded under confinement:\n{confined.summary()}"
    assert targets.traces() == []

    # The control: the same kernel with confinement off does get out (the probe is real, and this test can fail).
    loose = _evaluate(task, ws, "off")
    assert not loose.correct and "OUTPUT_MISMATCH" in loose.codes, loose.summary()
    assert loose.confinement["level"] == "off" and not loose.confinement["confined"]
    traces = targets.traces()
    planted = [t for t in traces if "cudagent-plant-" in t]
    assert any(t.endswith("-load") for t in planted) and any(t.endswith("-call") for t in planted), traces
    assert len(planted) == 2 * len(targets.plant_dirs), traces  # every directory, at load and in the call
    assert "a tcp connection" in traces and "a abstract connection" in traces, traces
    # each success adds 1 to every output element: the error counts them (ptrace and /proc/<pid>/mem of the
    # sibling leave no trace once the candidate's process is gone, and depend on the machine's Yama setting)
    assert loose.max_abs_error >= len(traces), (loose.max_abs_error, traces)


@pytest.mark.slow
@needs_confinement
def test_python_code_of_the_candidate_is_confined_too(tmp_path):
    """With the static audit off (it rejects file I/O in model_new.py at once), the process itself refuses; the
    verdict says what held."""
    task = load_task(HERE / "tasks" / "vadd.py")
    ws = Workspace.create(tmp_path / "ws", task.source)
    victim = Path.home() / f"cudagent-plant-{secrets.token_hex(6)}"
    ws.model_new_py.write_text(
        "import torch.nn as nn\n"
        f"open({str(victim)!r}, 'w').write('planted')\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, alpha):\n"
        "        super().__init__()\n"
        "        self.alpha = alpha\n"
        "    def forward(self, a, b):\n"
        "        return a * self.alpha + b\n"
    )
    try:
        # a process started anew (no fork server): confined before it imports torch
        options = EvalOptions(timing=False, audit_static=False, stock_trials=1, fork_server=False)
        with Evaluator(task, resolve_device("cpu"), options) as ev:
            v = ev.evaluate(ws)
        assert not victim.exists()
        assert v.confinement["confined"] and v.confinement["notes"] == [], v.confinement
        assert "IMPORT_FAILED" in v.codes and "Permission denied" in v.error, v.summary()
    finally:
        victim.unlink(missing_ok=True)


def _run_script(script: Path) -> subprocess.CompletedProcess:
    """A Python script of a test, in a fresh interpreter with this checkout's cudagent, in the script's folder."""
    return subprocess.run(
        [sys.executable, "-s", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=script.parent,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )


def test_strict_refuses_to_run_what_it_cannot_confine(tmp_path):
    """Where a mechanism is missing, strict ends the process before any candidate code: here, a seccomp filter for
    an architecture the kernel does not run is what fails."""
    import cudagent.evaluator.jail.confine as confine

    assert confine.LEVELS == ("strict", "best-effort", "off")
    script = tmp_path / "strict.py"
    script.write_text(
        "import platform, sys\n"
        "platform.machine = lambda: 'sparc64'\n"
        "import cudagent.evaluator.jail.confine as c, cudagent.evaluator.jail.entry as entry\n"
        "entry.run_child(['--confine', c.Plan('strict').to_json(), '--fd', '0'])\n"
    )
    done = _run_script(script)
    assert done.returncode == confine.EXIT_UNCONFINED, done.stdout + done.stderr
    assert "strict confinement is not available here" in done.stdout
    assert "sparc64" in done.stdout


@pytest.mark.slow
@needs_confinement
def test_a_serve_sessions_candidate_cannot_reach_another_sessions_files(tmp_path, cpu_service):
    """Through a real `cudagent serve`: the probe runs in a session of its own and aims at a file of another
    session's directory in the service's scratch (written there by this test, as a concurrent session's would be),
    and at the rest."""
    import glob
    import json

    from tests.agent.episodes import cli_env, cudagent
    from tests.serve.service_proc import TOKEN

    scratch = sorted(glob.glob("/tmp/cudagent-serve-*/cpu-scratch"), key=os.path.getmtime)
    assert scratch, "the service keeps no scratch where sessions live"
    other = Path(scratch[-1]) / f"other-session-{secrets.token_hex(8)}"
    other.mkdir()
    (other / "model_new.py").write_text("another session's kernel")
    targets = Targets(tmp_path)
    try:
        candidate = tmp_path / "probe"
        (candidate / "kernels").mkdir(parents=True)
        shutil.copy2(PROBE / "kernels" / "escape.cpp", candidate / "kernels" / "escape.cpp")
        (candidate / "kernels" / "escape_targets.h").write_text(targets.header(secret=other / "model_new.py"))
        shutil.copy2(PROBE / "model_new.py", candidate / "model_new.py")
        env = {**cli_env(tmp_path / "home", None), "CUDAGENT_EVALUATOR_TOKEN": TOKEN}
        argv = ["check", str(HERE / "tasks" / "vadd.py"), str(candidate), "--json", "--no-timing"]
        done = cudagent([*argv, "--evaluator", cpu_service.url], env)
        verdict = json.loads(done.stdout)
        assert verdict["confinement"]["confined"], verdict["confinement"]
        assert verdict["correct"], f"an escape attempt succeeded in a serve session: {verdict['error']}"
        assert targets.traces() == []
    finally:
        targets.close()
        shutil.rmtree(other)


@pytest.mark.slow
def test_doctor_says_what_a_candidate_would_get_and_bad_levels_are_one_sentence(tmp_path):
    import json

    from tests.agent.episodes import cli_env, cudagent

    env = cli_env(tmp_path / "home", None)
    rows = {}
    for level in ("best-effort", "off"):
        done = cudagent(["doctor", "--no-server", "--device", "cpu", "--json"], {**env, "CUDAGENT_CONFINE": level})
        rows[level] = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "candidate jail")
    assert rows["off"]["ok"] is False and "no jail (--confine off)" in rows["off"]["detail"]
    if SUPPORT["landlock_abi"] >= 6 and SUPPORT["seccomp"] and jail_level.decide("best-effort", "cpu").jailed:
        assert rows["best-effort"]["ok"] is True, rows
        assert "bubblewrap" in rows["best-effort"]["detail"] and "Landlock and seccomp" in rows["best-effort"]["detail"]
    bad = cudagent(["check", "task.py", "cand", "--confine", "loose"], env)
    said = " ".join(bad.stderr.replace("│", " ").split())  # typer's error box wraps lines
    assert bad.returncode == 2 and "'loose' is not a confinement level; use strict, best-effort or off" in said
    bad_env = cudagent(["doctor", "--no-server", "--json"], {**env, "CUDAGENT_CONFINE": "loose"})
    assert bad_env.returncode == 2 and "CUDAGENT_CONFINE='loose' is not a level" in bad_env.stderr, bad_env.stderr


@pytest.mark.skipif(torch_has_cuda(), reason="needs a machine where CUDA cannot start")
@pytest.mark.parametrize("level", ["strict", "best-effort", "off"])
def test_a_candidate_process_whose_cuda_will_not_start_has_crashed(level):
    """The jail is decided once, by a trusted probe (here: for the CPU, where it holds); a candidate process in which
    CUDA then does not start has failed on its own (CRASHED, said in one sentence), and nothing about the jail of
    the next one changes: there is no fallback a candidate could cause (the jail's issue, class 4)."""
    from cudagent.evaluator.jail.cell import Cell
    from cudagent.evaluator.jail.process import ChildFailure, ChildProcess

    if level == "strict" and not jail_level.decide("best-effort", "cpu").jailed:
        pytest.skip("strict needs bubblewrap")
    cell = Cell(jail_level.decide(level, "cpu"), "cpu")
    child = ChildProcess(device="cuda", cell=cell)
    try:
        child.spawn()
        with pytest.raises(ChildFailure) as failure:
            child.handshake()
    finally:
        child.close()
        cell.close()
    assert failure.value.code == "CRASHED", failure.value.message
    if level != "off":
        assert "CUDA did not start in the candidate's process" in failure.value.message


@needs_confinement
def test_a_confined_process_still_names_its_threads_and_finds_no_daemon(tmp_path):
    """What the CUDA driver does in cuInit (name its threads through /proc/<pid>/task/<tid>/comm, bind a Unix socket
    of its own: a refusal of either is its error 304, seen on the H100) and what NVML does (look for
    nvidia-persistenced's socket): all must still work confined, while another process's /proc stays closed and
    nothing connects to the socket the process bound, not even the process itself."""
    script = tmp_path / "threads.py"
    script.write_text(
        "import os, socket, threading\n"
        "import cudagent.evaluator.jail.privileges as i, cudagent.evaluator.jail.confine as c\n"
        "i.drop_privileges(); assert c.enter(c.Plan('strict'))['confined']\n"
        "ready, go, tids = threading.Event(), threading.Event(), []\n"
        "def run():\n"
        "    tids.append(threading.get_native_id()); ready.set(); go.wait()\n"
        "t = threading.Thread(target=run); t.start(); ready.wait()\n"
        "for path in (f'/proc/self/task/{tids[0]}/comm', f'/proc/{os.getpid()}/task/{tids[0]}/comm'):\n"
        "    open(path, 'w').write('cuda-EvtHandlr')\n"
        "open('/proc/thread-self/comm', 'w').write('main')\n"
        "go.set(); t.join()\n"
        "try:\n"
        "    socket.socket(socket.AF_UNIX).connect('/run/nvidia-persistenced/socket')\n"
        "except ConnectionRefusedError:\n"
        "    print('refused')\n"
        "own = socket.socket(socket.AF_UNIX); own.bind(f'\\0cudagent-test-{os.getpid()}'); own.listen(1)\n"
        "try:\n"
        "    socket.socket(socket.AF_UNIX).connect(f'\\0cudagent-test-{os.getpid()}')\n"
        "except ConnectionRefusedError:\n"
        "    print('refused')\n"
        "try:\n"
        "    open('/proc/1/environ').read()\n"
        "except PermissionError:\n"
        "    print('closed')\n"
    )
    done = _run_script(script)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["refused", "refused", "closed"], done.stdout
