"""The agent's shell sandbox: what bubblewrap confines, the limits every mode but `none` applies, and how the mode
is chosen and reported. The bwrap tests skip where bubblewrap cannot run, unless CUDAGENT_REQUIRE_BWRAP=1 (CI
installs it and sets that, so there they must run)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess

import pytest

from cudagent.agent.tools import Toolbox
from cudagent.boundary import shell as sb
from cudagent.errors import EnvironmentProblem
from cudagent.procs import Limits
from cudagent.workspace import Workspace
from tests.agent.episodes import cli_env, cudagent, events, write_task
from tests.agent.script_server import ScriptedServer, from_list

TASK = "import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n"
SMALL = Limits(memory_bytes=256 << 20, max_processes=24, max_file_bytes=8 << 20)

BWRAP_SKIPPED = sb.bwrap_problem() is not None and os.environ.get("CUDAGENT_REQUIRE_BWRAP") != "1"
needs_bwrap = pytest.mark.skipif(BWRAP_SKIPPED, reason=f"bubblewrap cannot run here: {sb.bwrap_problem()}")


def shell(tmp_path, mode: str, limits: Limits = SMALL):
    ws = Workspace.create(tmp_path / "ws", TASK)
    box = Toolbox(ws, TASK, None, sb.choose(mode, limits))
    return ws, lambda command, timeout=30: asyncio.run(box.run("bash", {"command": command, "timeout": timeout}))


@needs_bwrap
def test_bwrap_confines_files_and_network(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    ws, run = shell(tmp_path, "bwrap")
    with socket.socket() as server:  # a listener on the host's loopback: unreachable from the sandbox
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        obs = run(
            "echo kernel > kernels/k.cpp; echo x > " + str(outside / "x") + "; echo y >> model.py; "
            "echo z >> binding.cpp; echo w > /etc/cudagent-test; "
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\"; "
            "echo HOME=$HOME"
        )
    assert (ws.kernels_dir / "k.cpp").read_text() == "kernel\n"  # the workspace is writable
    assert not (outside / "x").exists() and not os.path.exists("/etc/cudagent-test")
    assert ws.model_py.read_text() == TASK and ws.tampered_infrastructure(TASK) == []
    # the folder outside is not in the view at all; the fixed files and the view's own root refuse writes
    assert f"{outside / 'x'}: No such file or directory" in obs.text, obs.text
    assert obs.text.count("Read-only file system") + obs.text.count("Permission denied") >= 3, obs.text
    assert "restored" not in obs.text  # nothing needed restoring: the writes never happened
    assert "ConnectionRefusedError" in obs.text or "Network is unreachable" in obs.text, obs.text
    assert "HOME=/tmp/home" in obs.text


@needs_bwrap
def test_bwrap_protects_the_git_link_and_kills_what_the_command_left(tmp_path):
    ws, run = shell(tmp_path, "bwrap")
    (ws.root / ".git").write_text("gitdir: /somewhere/else\n")
    obs = run("rm -f .git; echo gone > .git; (sleep 299.5 &) ; echo started")  # a duration no other test uses
    assert (ws.root / ".git").read_text() == "gitdir: /somewhere/else\n", obs.text
    assert "started" in obs.text
    # the PID namespace died with the command: its background sleep is gone
    left = subprocess.run(["pgrep", "-f", "sleep 299.5"], capture_output=True, text=True).stdout.split()
    assert left == [], left


@pytest.mark.parametrize("mode", ["bwrap", "limits"])
def test_limits_stop_memory_processes_and_huge_files(tmp_path, mode):
    if mode == "bwrap" and BWRAP_SKIPPED:
        pytest.skip(f"bubblewrap cannot run here: {sb.bwrap_problem()}")
    ws, run = shell(tmp_path, mode)
    hog = run('python3 -c "b = []\nwhile True: b.append(bytearray(32 << 20))"')
    assert not hog.ok and "used more than 0.2 GiB of memory and was killed" in hog.text, hog.text
    many = run("for i in $(seq 60); do sleep 30 & done; wait")
    assert not many.ok and "started more than 24 processes" in many.text, many.text
    big = run("head -c 50000000 /dev/zero > big.bin; echo status=$?; stat -c %s big.bin")
    assert "File too large" in big.text and "8388608" in big.text, big.text
    after = run("echo still fine")  # the shell works on
    assert after.ok and "still fine" in after.text


def test_no_sandbox_has_no_limits(tmp_path):
    ws, run = shell(tmp_path, "none")
    obs = run("head -c 20000000 /dev/zero > big.bin; stat -c %s big.bin")
    assert obs.ok and "20000000" in obs.text


def test_choice_and_fallback(monkeypatch):
    monkeypatch.setenv("CUDAGENT_BWRAP", "/nonexistent/bwrap")
    sb.bwrap_problem.cache_clear()
    try:
        auto = sb.choose("auto")
        assert auto.mode == "limits" and "bwrap is not installed" in auto.note
        assert "NOT confined" in auto.describe()
        with pytest.raises(EnvironmentProblem, match="--sandbox limits or --sandbox none"):
            sb.choose("bwrap")
        assert sb.choose("none").limits == Limits()
    finally:
        monkeypatch.delenv("CUDAGENT_BWRAP")
        sb.bwrap_problem.cache_clear()


def test_sandbox_none_warns_and_the_run_records_its_sandbox(tmp_path):
    task = write_task(tmp_path / "t")
    home = tmp_path / "home"
    steps = [{"tool": "bash", "arguments": {"command": "echo hello"}}]
    with ScriptedServer(from_list(steps)) as server:
        proc = cudagent(
            ["optimize", str(task), "--device", "cpu", "--json", "--no-final-check", "--sandbox", "none"],
            cli_env(home, server.url),
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning: --sandbox none" in proc.stderr
    evs = events(proc.stdout)
    assert evs[0]["event"] == "start" and evs[0]["sandbox"]["mode"] == "none"
    run_id = evs[-1]["run_id"]
    header = json.loads((home / "runs" / run_id / "trajectory.jsonl").read_text().splitlines()[0])
    assert header["sandbox"]["requested"] == "none" and header["sandbox"]["mode"] == "none"


def test_bwrap_where_it_cannot_run_is_an_environment_error(tmp_path):
    task = write_task(tmp_path / "t")
    env = cli_env(tmp_path / "home", "http://127.0.0.1:9/v1")
    env["CUDAGENT_BWRAP"] = str(tmp_path / "no-bwrap")
    proc = cudagent(["optimize", str(task), "--device", "cpu", "--sandbox", "bwrap"], env)
    assert proc.returncode == 3
    assert "bwrap sandbox cannot run here" in proc.stderr and "--sandbox limits" in proc.stderr
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())


def test_watchdog_sees_processes_that_leave_the_group(tmp_path):
    """A child that calls setsid leaves the process group; the memory watchdog still counts and kills it."""
    ws, run = shell(tmp_path, "limits")
    obs = run('setsid python3 -c "b = []\nwhile True: b.append(bytearray(32 << 20))" ; echo after', timeout=20)
    assert "used more than" in obs.text, obs.text
