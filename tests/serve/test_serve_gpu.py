"""On the GPU: `cudagent serve` on this host's GPU and two `cudagent optimize --evaluator URL` clients at once, each
running the scripted CUDA episode (a real kernel, compiled, profiled, finished, re-evaluated). Both reach tier 3 in
the run; the service's log shows every timed evaluation alone on the GPU (windows never overlap). Set
CUDAGENT_SERVE_LOG to a path to keep a readable log (the device run commits it)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from tests.agent.episodes import REPO, cudagent, git, summary
from tests.agent.script_server import ScriptedServer, from_list
from tests.agent.test_agent_gpu import _write_steps
from tests.serve.service_proc import ServiceProcess, timing_windows
from tests.serve.test_serve import remote_env

pytestmark = pytest.mark.serial  # it times kernels: alone on the GPU


def test_two_clients_share_one_gpu_service_with_timing_serialized(tmp_path):
    with ServiceProcess(tmp_path / "svc", device="cuda") as svc:
        steps = _write_steps()
        outcomes = {}

        def client(name: str):
            task = tmp_path / name / "scale_shift_tanh.py"
            task.parent.mkdir()
            shutil.copy(REPO / "examples" / "tasks" / "scale_shift_tanh.py", task)
            with ScriptedServer(from_list(steps)) as server:
                env = remote_env(tmp_path / name / "home", server.url, svc.url)
                outcomes[name] = cudagent(["optimize", str(task), "--json"], env)

        threads = [threading.Thread(target=client, args=(n,)) for n in ("client-a", "client-b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _, info = svc.get("/v1/info")
    log = svc.log.read_text()
    report = [f"service: {info}"]
    for name, proc in sorted(outcomes.items()):
        assert proc.returncode == 0, proc.stderr[-3000:]
        s = summary(proc.stdout)
        report.append(f"{name}: {s['exit_reason']}, best {s['best']}, final {s['final']}")
        report.append(git(s["repo"], "log", "--format=%h %s", s["branch"]))
        assert s["best"]["in_run"]["tier"] == 3 and s["final"]["correct"] is True, s
        msg = git(s["repo"], "log", "-1", "--format=%B", s["best"]["commit"])
        assert "Cudagent-GPU: NVIDIA" in msg
    spans = timing_windows(log)
    report.append("timed evaluations on the GPU (start, end, session):")
    report += [f"  {a} - {b}  {sid}" for a, b, sid in spans]
    report.append("service log:\n" + log)
    if os.environ.get("CUDAGENT_SERVE_LOG"):
        Path(os.environ["CUDAGENT_SERVE_LOG"]).write_text("\n".join(report))
    assert len(spans) >= 4 and len({sid for *_, sid in spans}) == 2  # a profile and a final check per client
    for (_, end, _), (start, _, _) in zip(spans, spans[1:]):
        assert end <= start, spans  # one timed evaluation at a time
