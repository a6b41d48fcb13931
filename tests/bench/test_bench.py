"""`cudagent bench` on the CPU over C++ solutions: a KernelBench-style layout, reports, degenerate tasks, crash
isolation, resume, and the same workers on a local Ray instance."""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

from cudagent.bench.runner import WORKER
from cudagent.bench.tasks import discover
from cudagent.taskpool import run_worker
from tests.agent.episodes import REPO, TASK, cli_env, cudagent

DEGENERATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Outputs far below the tolerance: zeros pass."""

    def forward(self, x):
        return x * 1e-6


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def kernelbench(tmp_path_factory):
    root = tmp_path_factory.mktemp("kb")
    (root / "KernelBench" / "level1").mkdir(parents=True)
    (root / "KernelBench" / "level2").mkdir(parents=True)
    (root / "KernelBench" / "level1" / "1_axpby.py").write_text(TASK)
    (root / "KernelBench" / "level1" / "2_tiny.py").write_text(DEGENERATE)
    (root / "KernelBench" / "level2" / "1_axpby_wrong.py").write_text(TASK)
    sols = root / "solutions"
    shutil.copytree(REPO / "examples" / "solutions" / "cpu" / "axpby", sols / "1_axpby")
    wrong = sols / "1_axpby_wrong"
    shutil.copytree(REPO / "examples" / "solutions" / "cpu" / "axpby", wrong)
    text = (wrong / "model_new.py").read_text().replace("self.alpha)", "self.alpha + 1.0)")
    (wrong / "model_new.py").write_text(text)
    return root


def test_discovery_and_selection(kernelbench):
    tasks = discover(kernelbench)
    assert [t.key for t in tasks] == ["1/1_axpby", "1/2_tiny", "2/1_axpby_wrong"]
    assert [t.key for t in discover(kernelbench, levels=["2"])] == ["2/1_axpby_wrong"]
    assert [t.key for t in discover(kernelbench, select="*tiny")] == ["1/2_tiny"]
    listed = kernelbench / "list.txt"
    listed.write_text("# a comment\n1_axpby\n2/1_axpby_wrong\n")
    assert [t.key for t in discover(kernelbench, list_file=listed)] == ["1/1_axpby", "2/1_axpby_wrong"]


@pytest.mark.slow
def test_bench_over_cpu_solutions_reports_per_level(kernelbench, tmp_path):
    out = tmp_path / "out"
    env = cli_env(tmp_path / "home", None)
    proc = cudagent(
        [
            "bench",
            str(kernelbench),
            "--solutions",
            str(kernelbench / "solutions"),
            "--device",
            "cpu",
            "--out",
            str(out),
            "--json",
            "--missing-as-failed",  # the task without a solution still meets the null candidates (and fails)
        ],
        env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [x["event"] for x in lines] == ["task", "task", "task", "summary"]
    s = lines[-1]
    assert s["tasks"] == 3 and s["correct"] == 1 and set(s["levels"]) == {"1", "2"}
    l1, l2 = s["levels"]["1"], s["levels"]["2"]
    assert (l1["tasks"], l1["correct"], l1["missing_solutions"]) == (2, 1, 1)
    assert (l2["tasks"], l2["correct"]) == (1, 0)
    assert s["overall"]["degenerate"] == ["1/2_tiny"]
    assert l1["geomean_eager_correct"] and l1["fast_1_eager"] in (0.0, 0.5)
    assert s["overall"]["geomean_compile_all"] is not None
    report = json.loads((out / "report.json").read_text())
    wrong = next(r for r in report["results"] if r["key"] == "2/1_axpby_wrong")
    assert wrong["tier"] == -1 and any(v["code"] == "OUTPUT_MISMATCH" for v in wrong["violations"])
    assert "torch" in report and report["sizes"].endswith(report["sizes"].split("sha256 ")[-1])
    md = (out / "report.md").read_text()
    assert "| level 1 | 2 | 0 | 1 | 50% |" in md and "degenerate (zeros" in md  # tasks, skipped, correct
    png = (out / "speedups.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] == 720
    # --resume keeps what is done and runs nothing again
    again = cudagent(
        [
            "bench",
            str(kernelbench),
            "--solutions",
            str(kernelbench / "solutions"),
            "--device",
            "cpu",
            "--out",
            str(out),
            "--json",
            "--resume",
        ],
        env,
    )
    assert again.returncode == 0
    assert [json.loads(x)["event"] for x in again.stdout.splitlines()] == ["summary"]
    assert len((out / "results.jsonl").read_text().splitlines()) == 3


def test_a_dying_or_hanging_worker_is_that_tasks_failure(kernelbench):
    env = dict(os.environ)
    died = run_worker(WORKER, ["--task", str(kernelbench / "nope.py")], env, 120)  # argparse is fine; no such task
    assert died["correct"] is False and "does not exist" in died["error"]
    crashed = run_worker(WORKER, ["--bogus-flag"], env, 120)
    assert crashed["crashed"] and "exit status 2" in crashed["error"]
    hung = run_worker(
        WORKER,
        [
            "--task",
            str(kernelbench / "KernelBench" / "level1" / "1_axpby.py"),
            "--device",
            "cpu",
            "--solution",
            str(kernelbench / "solutions" / "1_axpby"),
        ],
        env,
        0.5,
    )
    assert hung["crashed"] and "ran past" in hung["error"]


def test_bench_usage_errors(tmp_path, kernelbench):
    env = cli_env(tmp_path / "home", None)
    missing = cudagent(["bench", str(tmp_path / "nope"), "--device", "cpu"], env)
    assert missing.returncode == 2 and "not a directory" in missing.stderr
    level = cudagent(["bench", str(kernelbench), "--level", "7", "--device", "cpu"], env)
    assert level.returncode == 2 and "no level 7" in level.stderr
    gpus = cudagent(["bench", str(kernelbench), "--gpus", "0", "--device", "cpu"], env)
    assert gpus.returncode == 2 and "--gpus needs a CUDA device" in gpus.stderr


@pytest.mark.slow
def test_bench_on_a_local_ray_instance(kernelbench, tmp_path):
    pytest.importorskip("ray", reason="Ray comes with the test extra")
    out = tmp_path / "out"
    proc = cudagent(
        [
            "bench",
            str(kernelbench),
            "--solutions",
            str(kernelbench / "solutions"),
            "--device",
            "cpu",
            "--level",
            "1",
            "--out",
            str(out),
            "--json",
            "--ray",
            "local",
            "--missing-as-failed",
        ],
        cli_env(tmp_path / "home", None),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    rows, s = {r["key"]: r for r in lines[:-1]}, lines[-1]
    assert s["event"] == "summary" and s["tasks"] == 2 and set(rows) == {"1/1_axpby", "1/2_tiny"}
    assert rows["1/2_tiny"]["correct"] is False and "no solution" in rows["1/2_tiny"]["error"]
    # Ray runs both tasks at once on this two-core machine; the timing checks may refuse to vouch for a CPU time
    # measured beside the other task, and then only for that reason
    axpby = rows["1/1_axpby"]
    assert axpby["correct"] is True or _timing_only(axpby), axpby
    assert s["correct"] == int(axpby["correct"])


def _timing_only(row: dict) -> bool:
    violations = row.get("violations") or []
    return bool(violations) and all(v["code"].startswith(("BASELINE_", "TIMING_")) for v in violations)


@pytest.mark.slow
def test_bench_without_solutions_runs_the_agent(kernelbench, tmp_path):
    from tests.agent.episodes import FINISH, SOLVE
    from tests.agent.script_server import ScriptedServer, from_list

    out = tmp_path / "out"
    with ScriptedServer(from_list(SOLVE + [FINISH])) as server:
        proc = cudagent(
            [
                "bench",
                str(kernelbench),
                "--select",
                "1_axpby",
                "--level",
                "1",
                "--device",
                "cpu",
                "--out",
                str(out),
                "--json",
                "--max-turns",
                "10",
            ],
            cli_env(tmp_path / "home", server.url),
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    task, summary = lines[0], lines[-1]
    assert task["key"] == "1/1_axpby" and task["run_id"].startswith("1_axpby-")
    assert task["exit_reason"] == "finished" and task["turns"] == 6
    # the bench scores the final re-evaluation, timing included; on a loaded CPU its interference checks may
    # refuse to vouch for the timing, and then only for that reason
    assert (task["correct"] is True and task["tier"] >= 1) or _timing_only(task), task
    assert summary["tasks"] == 1 and summary["correct"] == int(task["correct"]) and "optimize" in summary["mode"]


CROWDED_ONCE = """import os
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"Runs out of device memory the first time it runs (as beside other tasks), then works.\"\"\"

    def forward(self, x):
        if not os.path.exists(MARKER):
            open(MARKER, "w").close()
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return x * 2 + 1


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_baselines_only_side_by_side_with_the_crowded_out_run_alone(tmp_path):
    """--baselines-only times the references (eager, torch.compile) with each task's phases; --per-gpu runs tasks
    side by side under the device share; a task that runs out of memory beside others runs again alone (and is
    remembered so); invocations add up over --resume."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "a_axpby.py").write_text(TASK)
    marker = tmp_path / "ran-out-once"
    (tasks / "b_crowded.py").write_text(CROWDED_ONCE.replace("MARKER", repr(str(marker))))
    out = tmp_path / "out"
    env = cli_env(tmp_path / "home", None)
    args = ["bench", str(tasks), "--baselines-only", "--per-gpu", "2", "--device", "cpu", "--out", str(out), "--json"]
    proc = cudagent(args, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker.exists()  # the first attempt did run out
    rows = {r["name"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert set(rows) == {"a_axpby", "b_crowded"}
    for row in rows.values():
        assert row["baselines_only"] and not row.get("error"), row
        assert row["time_ms"]["eager"] > 0 and row["time_ms"]["compile"] > 0 and row["time_ms"]["candidate"] is None
        assert set(row["phases_s"]) == {"start", "validate", "null_check", "baselines"}
        assert row["process_s"] >= row["wall_s"] > 0
    assert rows["b_crowded"]["retried_alone"] and not rows["a_axpby"].get("retried_alone")
    assert (out / "crowded-out.txt").read_text().split() == ["-/b_crowded"]
    md = (out / "report.md").read_text()
    assert "References timed alone (--baselines-only): 2 of 2 tasks" in md and "2 tasks at once per GPU" in md
    again = cudagent([*args, "--resume"], env)
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads(again.stdout.splitlines()[-1])
    runs = [json.loads(x) for x in (out / "invocations.jsonl").read_text().splitlines()]
    assert [r["tasks"] for r in runs] == [2, 0]
    assert summary["wall_s"] == round(sum(r["wall_s"] for r in runs), 1)


def test_bench_throughput_option_errors(tmp_path, kernelbench):
    env = cli_env(tmp_path / "home", None)
    args = ["bench", str(kernelbench), "--device", "cpu"]
    both = cudagent([*args, "--baselines-only", "--solutions", str(tmp_path)], env)
    assert both.returncode == 2 and "--baselines-only times the references alone" in both.stderr
    zero = cudagent([*args, "--per-gpu", "0"], env)
    assert zero.returncode == 2 and "--per-gpu" in zero.stderr
