"""`cudagent serve` on the CPU (C++ tasks): a real service process on localhost, real clients.

The scripted episodes are those of tests/agent (a real HTTP model server, real git, the real evaluator), with
`--evaluator URL`: the agent, its shell and git here, every build and verification in the service."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from cudagent.agent.chat_driver import ChatDriver
from cudagent.agent.episode import EpisodeLimits
from cudagent.agent.recorders import MemoryRecorder, Recorders
from cudagent.evaluator.port import EvaluatorUnavailable, SnapshotError
from cudagent.evaluator.remote import EvaluatorPool
from cudagent.serve.service import is_loopback, load_or_create_token
from cudagent.task import Task
from tests.agent.episodes import FINISH, MODEL_NEW, SOLVE, TASK, cli_env, cudagent, events, git, summary, write_task
from tests.agent.fakes import ScriptedPolicy, call, episode
from tests.agent.script_server import ScriptedServer, from_list
from tests.serve.service_proc import TOKEN, ServiceProcess, timing_windows

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::ResourceWarning")]


@pytest.fixture
def service(cpu_service):
    return cpu_service  # the session's (conftest.py)


def remote_env(home, model_url, service_url=None):
    env = cli_env(home, model_url)
    env["CUDAGENT_EVALUATOR_TOKEN"] = TOKEN
    if service_url:
        env["CUDAGENT_EVALUATOR_URL"] = service_url
    return env


def branch_record(s: dict) -> dict:
    """What a user reviews: the tier, the commit subjects and the best kernel's files."""
    repo, branch = s["repo"], s["branch"]
    return {
        "tier": s["best"]["tier"] if s["best"] else None,
        "subjects": git(repo, "log", "--format=%s", branch).splitlines()[::-1][1:],
        "model_new": git(repo, "show", f"{s['best']['commit']}:model_new.py") if s["best"] else None,
        "kernel": git(repo, "show", f"{s['best']['commit']}:kernels/axpby_cpu.cpp") if s["best"] else None,
    }


def test_a_remote_episode_matches_the_local_one_and_resumes_against_the_service(tmp_path, service):
    task = write_task(tmp_path / "t")
    steps = SOLVE + [FINISH]
    with ScriptedServer(from_list(steps)) as server:
        local = cudagent(["optimize", str(task), "--device", "cpu", "--json", "--no-final-check"],
                         cli_env(tmp_path / "local", server.url))  # fmt: skip
    assert local.returncode == 0, local.stderr[-3000:]
    with ScriptedServer(from_list(steps)) as server:
        env = remote_env(tmp_path / "remote", server.url)
        # the first part of the run stops at its turn limit; the resumed part finds the service in the trajectory
        first = cudagent(["optimize", str(task), "--evaluator", service.url, "--json", "--max-turns", "3"], env)
        assert first.returncode == 0, first.stderr[-3000:]
        assert summary(first.stdout)["exit_reason"] == "max_turns"
        resumed = cudagent(["optimize", "--resume", "last", "--json", "--max-turns", "10", "--no-final-check"], env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    s_local, s_remote = summary(local.stdout), summary(resumed.stdout)
    assert s_remote["exit_reason"] == "finished" and s_remote["turns"] == len(steps)
    assert branch_record(s_remote) == branch_record(s_local)
    assert branch_record(s_remote)["tier"] == 1 and branch_record(s_remote)["model_new"] == MODEL_NEW
    header = json.loads((tmp_path / "remote" / "runs" / s_remote["run_id"] / "trajectory.jsonl").open().readline())
    assert header["evaluator"] == {"urls": [service.url]} and header["env"]["device"] == "cpu"
    assert TOKEN not in json.dumps(header)  # the token is never recorded
    trailers = git(s_remote["repo"], "log", "-1", "--format=%B", s_remote["best"]["commit"])
    assert "Cudagent-Tier: 1" in trailers and "Cudagent-GPU: CPU" in trailers


def test_a_garbage_episode_ends_cleanly(tmp_path, service):
    task = write_task(tmp_path / "t")
    steps = [
        {"text": "I will now think about kernels without acting."},
        {"tool": "write_file", "raw_arguments": "{not json"},
        {"tool": "write_file", "arguments": {"path": "model_new.py", "content": "def broken(:\n"}},
        {"tool": "verify", "arguments": {}},
        {"tool": "write_file", "arguments": {"path": "../../escape.py", "content": "x"}},
        {"tool": "compile", "arguments": {}},
    ]
    with ScriptedServer(from_list(steps, after={"garbage": "<html>not json</html>"})) as server:
        proc = cudagent(
            ["optimize", str(task), "--evaluator", service.url, "--json", "--max-turns", "9"]
            + ["--max-format-errors", "3"],
            remote_env(tmp_path / "home", server.url),
            timeout=600,
        )
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["best"] is None and s["exit_reason"] in ("max_turns", "format_errors", "policy_error")
    verify = [e for e in events(proc.stdout) if e.get("event") == "action" and e.get("tool") == "verify"]
    assert not (tmp_path / "t" / "escape.py").exists() and not (tmp_path / "escape.py").exists()
    assert all(not e.get("ok") for e in verify)


def test_refusals_are_json_errors_with_a_status(service, tmp_path):
    assert service.get("/v1/info", token=None)[0] == 401
    status, body = service.get("/v1/info", token="wrong-token-but-long-enough")
    assert status == 403 and body["error"]["code"] == "BAD_TOKEN"
    assert service.get("/v1/health", token=None) == (200, {"status": "ok", "workers_up": 1, "workers": 1})
    status, info = service.get("/v1/info")
    assert status == 200 and info["workers"][0]["device"]["kind"] == "cpu" and "queue" in info
    # a session for a bad task is refused with the task's own problem
    status, body = service.post("/v1/sessions", {"task": {"name": "bad", "source": "import torch\n"}})
    assert status == 422 and body["error"]["code"] == "BAD_TASK", body
    status, opened = service.post("/v1/sessions", {"task": {"name": "axpby_small", "source": TASK}})
    assert status == 200, opened
    sid = opened["session"]
    for path in ("../model.py", "kernels/../../x.cpp", "/etc/passwd", "kernels/a.exe", "build/x.cpp"):
        status, body = service.post(f"/v1/sessions/{sid}/build", {"files": {path: "eA=="}})
        assert status == 400 and body["error"]["code"] == "BAD_SNAPSHOT", (path, body)
    status, body = service.post(f"/v1/sessions/{sid}/evaluate", {"files": {"model_new.py": "%%%"}})
    assert status == 400 and "base64" in body["error"]["message"]
    big = b'{"files": {"model_new.py": "' + b"A" * (25 << 20) + b'"}}'
    status, body = service.request("POST", f"/v1/sessions/{sid}/build", big)
    assert status == 413 and body["error"]["code"] == "TOO_LARGE"
    status, body = service.request("POST", f"/v1/sessions/{sid}/build", b"{not json")
    assert status == 400 and body["error"]["code"] == "BAD_REQUEST"
    assert service.post("/v1/sessions/not-a-session/build", {"files": {}})[0] == 404
    assert service.get("/v1/shell?cmd=id")[0] == 404  # there is no way to run a command
    assert service.request("DELETE", f"/v1/sessions/{sid}")[0] == 200
    assert service.post(f"/v1/sessions/{sid}/build", {"files": {}})[1]["error"]["code"] == "SESSION_UNKNOWN"


def test_a_client_is_told_at_once_when_nothing_answers_and_when_its_token_is_wrong(tmp_path, service):
    task = write_task(tmp_path / "t")
    env = remote_env(tmp_path / "home", "http://127.0.0.1:9/v1")
    start = time.monotonic()
    proc = cudagent(["optimize", str(task), "--evaluator", "http://127.0.0.1:9"], env)
    assert proc.returncode == 3 and "nothing answers at http://127.0.0.1:9" in proc.stderr, proc.stderr
    assert time.monotonic() - start < 30
    proc = cudagent(["optimize", str(task), "--evaluator", "127.0.0.1:9"], env)
    assert proc.returncode == 2 and "needs a scheme" in proc.stderr
    env["CUDAGENT_EVALUATOR_TOKEN"] = "not-the-token-at-all"
    proc = cudagent(["optimize", str(task), "--evaluator", service.url], env)
    assert proc.returncode == 3 and "not this service's" in proc.stderr, proc.stderr
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())


def test_the_service_killed_mid_run_and_restarted(tmp_path):
    """Killed before a verify (the client gives up after its retry window: the tool call fails, the run goes on),
    restarted before the next: the client opens a new session, the run gets its verdict and ends normally."""
    svc = ServiceProcess(tmp_path / "svc").start()
    task = write_task(tmp_path / "t")
    verify = {"tool": "verify", "arguments": {}}
    steps = SOLVE[:4] + [verify, verify, FINISH]
    done = set()

    def script(i, messages):
        if i == 4 and "kill" not in done:
            done.add("kill")
            svc.kill()
        if i == 5 and "restart" not in done:
            done.add("restart")
            svc.start()
        return steps[i] if i < len(steps) else FINISH

    try:
        with ScriptedServer(script) as server:
            env = remote_env(tmp_path / "home", server.url, svc.url)
            env["CUDAGENT_EVALUATOR_RETRY_S"] = "4"
            proc = cudagent(["optimize", str(task), "--json", "--no-final-check"], env)
    finally:
        svc.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc.stdout)
    assert s["exit_reason"] == "finished" and s["best"]["tier"] == 1 and s["best"]["turn"] == 6
    lines = (tmp_path / "home" / "runs" / s["run_id"] / "trajectory.jsonl").read_text().splitlines()
    turn5 = json.loads(lines[5])["actions"][0]
    assert turn5["ok"] is False and "nothing was judged" in turn5["output"], turn5
    assert "the evaluator service is unavailable" in turn5["output"]


def test_an_evaluator_gone_for_good_ends_the_run_with_exit_4_after_three_calls(tmp_path):
    """One call that judges nothing is that call's failure; three in a row end the run: recorded, resumable, exit 4,
    and under --json a JSON error after the summary."""
    svc = ServiceProcess(tmp_path / "svc").start()
    task = write_task(tmp_path / "t")
    verify = {"tool": "verify", "arguments": {}}
    steps = SOLVE[:4] + [verify] * 3 + [FINISH]

    def script(i, messages):
        if i == 4:
            svc.kill()
        return steps[i] if i < len(steps) else FINISH

    try:
        with ScriptedServer(script) as server:
            env = remote_env(tmp_path / "home", server.url, svc.url)
            env["CUDAGENT_EVALUATOR_RETRY_S"] = "2"
            proc = cudagent(["optimize", str(task), "--json", "--no-final-check"], env)
    finally:
        svc.kill()
    assert proc.returncode == 4, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.strip()]
    assert lines[-2]["event"] == "summary" and lines[-2]["exit_reason"] == "evaluator" and lines[-2]["turns"] == 7
    assert lines[-1]["exit_code"] == 4 and "judged nothing 3 times in a row" in lines[-1]["error"], lines[-1]
    assert f"--resume {lines[-2]['run_id']}" in proc.stderr


async def _episode(tmp_path, pool, i: int) -> tuple:
    """An in-process episode on the service (chat driver, memory recorder): its model_new.py has a syntax error on
    a line of its own (line i+3), so each verdict says which episode's files it judged."""
    source = "import torch\n" * (i + 2) + "def broken(:\n"
    policy = ScriptedPolicy([call("write_file", path="model_new.py", content=source), call("verify"), call("finish")])
    port = pool.port(Task(f"axpby_{i}", TASK, tmp_path / f"axpby_{i}.py"))
    await port.open()
    recorder = MemoryRecorder()
    ep = episode(tmp_path / f"ep{i}", port, EpisodeLimits(max_turns=5))
    ep.on_improvement = Recorders(recorder).improved
    result = await ChatDriver(ep, policy, Recorders(recorder), final_evaluation=False).run()
    await port.close()
    return result, recorder


async def _run_many(tmp_path, url: str, n: int) -> list[tuple[int, str]]:
    # the episodes past the queue's bound retry while the others are served: 180 s (the default) ran out once on a
    # loaded two-core machine, 16 still waiting or running
    pool = EvaluatorPool([url], TOKEN, retry_window_s=600)

    async def one(i):
        result, recorder = await _episode(tmp_path, pool, i)
        assert result.end_reason == "finished"
        return i, recorder.turns[1].actions[0]["output"]

    return await asyncio.gather(*(one(i) for i in range(n)))


def _tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, StopIteration):
            continue
    return total / 1024


def test_64_concurrent_episodes_each_get_their_own_verdicts_in_bounded_memory(tmp_path):
    with ServiceProcess(tmp_path / "svc", "--max-queue", "16") as svc:
        peak, stop = [0.0], threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], _tree_rss_mb(svc.proc.pid))
                time.sleep(0.05)

        before = _tree_rss_mb(svc.proc.pid)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        results = asyncio.run(_run_many(tmp_path, svc.url, 64))
        stop.set()
        sampler.join()
        status, info = svc.get("/v1/info")
    assert len(results) == 64
    for i, observation in results:
        assert f"model_new.py:{i + 3}:" in observation, (i, observation)  # its own files, nobody else's
    assert info["workers"][0]["sessions"] == 0 and info["queue"] == 0  # every session closed, nothing waiting
    # bounded whatever the number of sessions: the worker's own growth (1 GiB, as before the tasks were jailed) and
    # at most `--task-processes` jailed task processes (one torch each, about 250 MB resident here) at any moment
    hosts = info["workers"][0]["task_processes"]
    assert hosts["peak"] <= hosts["limit"] == 4, hosts
    assert peak[0] - before < 1024 + 400 * hosts["limit"], (before, peak[0])


def test_a_faulting_or_killed_worker_is_restarted_and_a_port_gives_up_after_its_window(tmp_path):
    svc = ServiceProcess(tmp_path / "svc").start()
    try:
        pool = EvaluatorPool([svc.url], TOKEN, retry_window_s=60)
        port = pool.port(Task("axpby_small", TASK, tmp_path / "axpby_small.py"))
        snapshot = {"model_new.py": b"def broken(:\n"}

        def worker_pids() -> list[int]:
            return [int(c) for c in open(f"/proc/{svc.proc.pid}/task/{svc.proc.pid}/children").read().split()]

        async def scenario():
            await port.open()
            first = await port.evaluate(snapshot, timing=False)
            # the evaluator itself fails mid-call (its session's directory replaced by a file, as a dying disk or
            # GPU would make it fail): that call answers EVALUATOR_FAULT, the worker restarts, the client retries
            # on a new session and gets the verdict
            (session_dir,) = glob.glob(f"/tmp/cudagent-serve-*/cpu-scratch/{port.session}")
            shutil.rmtree(session_dir)
            Path(session_dir).write_text("not a directory")
            second = await port.evaluate(snapshot, timing=False)
            # the worker killed outright: restarted too
            for pid in worker_pids():
                os.kill(pid, 9)
            third = await port.evaluate(snapshot, timing=False)
            await port.close()
            return first, second, third

        verdicts = asyncio.run(scenario())
        assert [v.violations[0].code for v in verdicts] == ["SYNTAX_ERROR"] * 3
        status, info = svc.get("/v1/info")
        assert info["workers"][0]["restarts"] == 2 and info["workers"][0]["up"]
        assert "failed inside the evaluator; this worker stops" in svc.log.read_text()
        with pytest.raises(SnapshotError, match="not a file an agent owns"):
            asyncio.run(pool.port(Task("axpby_small", TASK, None)).build({"../x.py": b""}))
    finally:
        svc.kill()
    pool.retry_window_s = 2
    start = time.monotonic()
    with pytest.raises(EvaluatorUnavailable, match="nothing answers"):
        asyncio.run(port.evaluate(snapshot, timing=False))
    assert time.monotonic() - start < 15


def test_bad_service_options_are_one_sentence_each(tmp_path, service):
    env = dict(os.environ, CUDAGENT_HOME=str(tmp_path / "home"), PYTHONWARNINGS="ignore")
    proc = cudagent(["serve", "--device", "gpu"], env)
    assert proc.returncode == 2 and "use cuda or cpu" in proc.stderr
    proc = cudagent(["serve", "--device", "cpu", "--token-file", str(tmp_path / "missing")], env)
    assert proc.returncode == 2 and "cannot read the token file" in proc.stderr
    (tmp_path / "short").write_text("abc\n")
    proc = cudagent(["serve", "--device", "cpu", "--token-file", str(tmp_path / "short")], env)
    assert proc.returncode == 2 and "shorter than 16 characters" in proc.stderr
    token = str(service.token_file)
    proc = cudagent(["serve", "--device", "cpu", "--port", str(service.port), "--token-file", token], env, timeout=300)
    assert proc.returncode == 3 and f"cannot listen on 127.0.0.1:{service.port}" in proc.stderr, proc.stderr[-2000:]


def test_the_first_start_makes_a_token_for_the_user_only_and_says_so(tmp_path):
    default = tmp_path / "home" / "serve-token"
    token, said = load_or_create_token(None, default)
    assert len(token) >= 32 and token in said and str(default) in said
    assert default.stat().st_mode & 0o777 == 0o600
    assert load_or_create_token(None, default) == (token, None)  # later starts reuse it and print nothing
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def test_a_vanished_clients_session_is_removed_after_the_idle_expiry(tmp_path):
    with ServiceProcess(tmp_path / "svc", "--idle-expiry", "1") as svc:
        port = EvaluatorPool([svc.url], TOKEN).port(Task("axpby_small", TASK, None))
        asyncio.run(port.open())  # and never closed: the client vanished
        (session_dir,) = glob.glob(f"/tmp/cudagent-serve-*/cpu-scratch/{port.session}")
        assert svc.get("/v1/info")[1]["workers"][0]["sessions"] == 1
        deadline = time.monotonic() + 30
        while Path(session_dir).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not Path(session_dir).exists()
        while svc.get("/v1/info")[1]["workers"][0]["sessions"] and time.monotonic() < deadline:
            time.sleep(0.2)  # the front hears of it a little after the worker
        assert svc.get("/v1/info")[1]["workers"][0]["sessions"] == 0
        assert "expired after 1 s idle" in svc.log.read_text()


def test_bench_scores_solutions_on_the_service(tmp_path, service):
    tasks, solutions = tmp_path / "tasks", tmp_path / "solutions"
    tasks.mkdir()
    solutions.mkdir()
    for name in ("axpby", "softmax"):
        shutil.copy(ROOT / "examples" / "tasks" / f"{name}.py", tasks / f"{name}.py")
    (solutions / "axpby.py").write_text("import torch\nclass ModelNew(:\n")  # judged there: rejected at once
    env = remote_env(tmp_path / "home", None)
    argv = ["bench", str(tasks), "--solutions", str(solutions), "--evaluator", service.url, "--json"]
    proc = cudagent([*argv, "--out", str(tmp_path / "out")], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {e["name"]: e for e in events(proc.stdout) if e["event"] == "task"}
    assert rows["softmax"]["skipped"] and not rows["axpby"]["correct"]
    assert rows["axpby"]["evaluator"] == [service.url] and "SYNTAX_ERROR" in json.dumps(rows["axpby"]["violations"])
    summary_event = events(proc.stdout)[-1]
    assert summary_event["event"] == "summary" and summary_event["gpus"].endswith(f"at once on {service.url}")
    proc = cudagent([*argv, "--out", str(tmp_path / "out2"), "--gpus", "0"], env)
    assert proc.returncode == 2 and "--gpus is for this machine" in proc.stderr


def test_check_on_the_service_gives_the_local_verdict(tmp_path, service):
    """`cudagent check --evaluator URL`: the same port as optimize's, so the same verdict as on this machine; the
    evaluation settings are the service's, so a command line that changes them is refused."""
    from tests.agent.episodes import SOLUTION

    task = write_task(tmp_path / "t")
    env = remote_env(tmp_path / "home", None)
    argv = ["check", str(task), str(SOLUTION), "--json", "--no-timing"]
    local = cudagent([*argv, "--device", "cpu"], env)
    remote = cudagent([*argv, "--evaluator", service.url], env)
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr[-2000:]
    mine, theirs = json.loads(local.stdout), json.loads(remote.stdout)
    assert mine["correct"] is theirs["correct"] is True and mine["tier"] == theirs["tier"] == 1
    assert [t["name"] for t in mine["trials"]] == [t["name"] for t in theirs["trials"]]
    refused = cudagent([*argv, "--evaluator", service.url, "--atol", "0.5"], env)
    assert refused.returncode == 2 and "--atol/--rtol cannot be used with --evaluator" in refused.stderr


def test_two_timed_evaluations_at_once_hold_the_device_one_after_the_other(service):
    """The service's sessions share its device as a bench's processes do (device/share.py): every timing holds it
    alone, so the timed windows of two sessions evaluating at once never overlap, and the log names each."""
    from cudagent.evaluator.port import snapshot_of
    from cudagent.workspace import resolve_candidate, workspace_for
    from tests.agent.episodes import SOLUTION

    snapshot = snapshot_of(workspace_for(resolve_candidate(SOLUTION), TASK))
    pool = EvaluatorPool([service.url], TOKEN)

    async def one():
        port = pool.port(Task("axpby_small", TASK, None))
        await port.open()
        try:
            return port.session.replace("-", "_"), await port.evaluate(snapshot, timing=True)
        finally:
            await port.close()

    async def both():
        return await asyncio.gather(one(), one())

    results = asyncio.run(both())
    assert all(v.correct and v.time_ms["candidate"] for _, v in results), [v.summary() for _, v in results]
    ours = {sid[:8] for sid, _ in results}
    spans = sorted(s for s in timing_windows(service.log.read_text()) if s[2] in ours)
    assert {sid for *_, sid in spans} == ours  # both timed, and the log says so
    for (_, end, _), (start, _, _) in zip(spans, spans[1:]):
        assert end <= start, spans  # one timing at a time


# ----- the service's side of the boundary (tests/adversarial/test_agent_boundary.py has the agent's) ---------------


def _snapshot(files: dict[str, str]) -> dict:
    import base64

    return {"files": {p: base64.b64encode(t.encode()).decode() for p, t in files.items()}}


SOLUTION = {
    "model_new.py": MODEL_NEW,
    "kernels/axpby_cpu.cpp": (ROOT / "examples/solutions/cpu/axpby/kernels/axpby_cpu.cpp").read_text(),
}


def test_a_clients_task_runs_only_in_the_jail(service, tmp_path):
    """A task whose module runs a command and writes a file when it is loaded: the session opens, the reference and
    the baselines serve their verdicts, and nothing of it reached this machine. (Defence off: the same task loaded
    as a local evaluator loads the user's own, in its process, writes both at once.)"""
    marker = tmp_path / "marker"
    evil = (
        f"import os\nos.system('touch {marker}-command; cat /proc/1/cmdline > {marker}-pid1')\n"
        f"try:\n    open('{marker}-file', 'w').write('written by a client')\nexcept OSError:\n    pass\n" + TASK
    )
    status, opened = service.post("/v1/sessions", {"task": {"name": "axpby_evil", "source": evil}})
    assert status == 200, opened
    sid = opened["session"]
    status, body = service.post(f"/v1/sessions/{sid}/evaluate", {**_snapshot(SOLUTION), "timing": True})
    assert status == 200, body
    assert body["verdict"]["correct"] and body["verdict"]["time_ms"]["eager"], body["verdict"]
    assert service.request("DELETE", f"/v1/sessions/{sid}")[0] == 200
    assert not list(tmp_path.glob("marker*")), list(tmp_path.glob("marker*"))
    # defence off: executed in this process, as a user's own task is
    assert Task("axpby_evil", evil, tmp_path / "axpby_evil.py").module.Model
    assert {p.name for p in tmp_path.glob("marker*")} == {"marker-command", "marker-pid1", "marker-file"}


def test_bad_input_is_a_4xx_a_restart_keeps_the_other_sessions_and_sessions_are_capped(tmp_path):
    svc = ServiceProcess(tmp_path / "svc", "--max-sessions", "2").start()
    try:
        opened = [svc.post("/v1/sessions", {"task": {"name": f"axpby_{i}", "source": TASK}}) for i in range(3)]
        assert [s for s, _ in opened] == [200, 200, 429], opened
        assert opened[2][1]["error"]["code"] == "TOO_MANY_SESSIONS"
        a, b = opened[0][1]["session"], opened[1][1]["session"]
        assert svc.post(f"/v1/sessions/{a}/build", _snapshot(SOLUTION))[0] == 200
        # a path the file system cannot take, beside the other client's open session: 400, no restart
        long_path = "kernels/" + "k" * 300 + ".cpp"
        status, body = svc.post(f"/v1/sessions/{b}/build", _snapshot({long_path: "// x\n"}))
        assert status == 400 and body["error"]["code"] == "BAD_SNAPSHOT", body
        status, body = svc.post(f"/v1/sessions/{a}/evaluate", {**_snapshot(SOLUTION), "timing": False})
        assert status == 200 and body["verdict"]["correct"], body
        assert svc.get("/v1/info")[1]["workers"][0]["restarts"] == 0
        # the worker killed outright: once it is back, both sessions answer under their own ids
        (worker,) = [int(c) for c in open(f"/proc/{svc.proc.pid}/task/{svc.proc.pid}/children").read().split()]
        os.kill(worker, 9)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status, body = svc.post(f"/v1/sessions/{a}/evaluate", {**_snapshot(SOLUTION), "timing": False})
            if status != 503:
                break
            time.sleep(0.5)
        assert status == 200 and body["verdict"]["correct"], body
        status, body = svc.post(f"/v1/sessions/{b}/build", _snapshot(SOLUTION))
        assert status == 200 and body["build"]["ok"], body
        assert svc.get("/v1/info")[1]["workers"][0]["restarts"] == 1
        assert "lost with a worker restart; opening it again" in svc.log.read_text()
    finally:
        svc.kill()
