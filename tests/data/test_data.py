"""`cudagent data` on the CPU: seed tasks, the programmatic composer, the filters on composed and planted bad tasks,
decontamination against KernelBench-format files, resume after kill -9."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cudagent.data.compose import compose, distinct, seed_task
from cudagent.data.filters import static_reason
from cudagent.data.ops import OPS
from cudagent.data.pipeline import FilterConfig, Pipeline
from cudagent.data.similarity import fingerprint, most_similar, similarity
from cudagent.task import load_task, validate_task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "tasks"


def test_every_seed_task_loads_and_runs(tmp_path):
    for op in OPS:
        task = seed_task(op.name)
        path = tmp_path / f"{task.name}.py"
        path.write_text(task.source)
        assert static_reason(task.source) is None, op.name
        validate_task(load_task(path), "cpu")  # raises with the reason if not


def test_the_composer_is_reproducible_and_chains_only_fitting_ops():
    first = [compose(seed) for seed in range(50)]
    again = [compose(seed) for seed in range(50)]
    assert [c.source for c in first] == [c.source for c in again]
    assert len({c.name for c in first}) == 50 and len({c.source for c in first}) == 50
    assert {len(c.ops) for c in first} >= {1, 2, 3, 4, 5}
    assert all(static_reason(c.source) is None for c in first)
    assert compose(7, "gpu").input_shape != compose(7, "cpu").input_shape
    chains = distinct(0, 200)
    assert len({tuple(c.ops) for c in chains}) == 200 and distinct(0, 200) == chains


PLANTED = {
    "random_in_forward": "x = x + torch.rand_like(x)",
    "dropout_in_forward": "x = F.dropout(x, 0.5)",
    "degenerate_zero": "x = x - x",
    "hangs": "while True:\n            pass",
}


def _planted(name: str, line: str) -> str:
    return f"""import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x):
        {line}
        return x


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
"""


def _near_copy(source: str) -> str:
    """An example task with its names changed and its sizes edited: what decontamination must still catch."""
    return source.replace("batch_size", "n_rows").replace("dim", "n_cols").replace("4096", "2048")


COMPOSED = 16  # composed tasks beside the planted ones: at least 70% of them must be kept


@pytest.mark.slow
def test_filters_keep_a_plausible_share_and_drop_each_planted_task_for_its_reason(tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    for c in distinct(0, COMPOSED):
        (folder / f"{c.name}.py").write_text(c.source)
    for name, line in PLANTED.items():
        (folder / f"{name}.py").write_text(_planted(name, line))
    (folder / "syntax_error.py").write_text("import torch\nclass Model(:\n")
    softmax = (EXAMPLES / "softmax.py").read_text()
    (folder / "near_copy_softmax.py").write_text(_near_copy(softmax))
    first = distinct(0, 1)[0]
    other_sizes = ", ".join("7" for _ in first.input_shape)  # same ops, other sizes: a duplicate all the same
    (folder / "zz_duplicate_of_first.py").write_text(first.source.replace(repr(first.input_shape)[1:-1], other_sizes))
    refs = {p.stem: p.read_text() for p in EXAMPLES.glob("*.py")}
    # 60 s: at 30 (a task's check 15) degenerate_zero's check ran out once on a loaded two-core machine, dropped by
    # "runs" before its degenerate output was seen
    config = FilterConfig(
        slots=[None, None], runtime_ms=(0.0, 1e6), compile_backend="aot_eager", references=refs, timeout_s=60
    )
    rows = {r["name"]: r for r in Pipeline(config, tmp_path / "out").run(sorted(folder.glob("*.py")))}
    assert len(rows) == COMPOSED + len(PLANTED) + 3
    expected = {
        "random_in_forward": "static",
        "dropout_in_forward": "static",
        "syntax_error": "static",
        "degenerate_zero": "degenerate",
        "hangs": "runs",
        "near_copy_softmax": "similarity",
        "zz_duplicate_of_first": "duplicate",
    }
    for name, by in expected.items():
        assert rows[name]["dropped_by"] == by, rows[name]
        assert rows[name]["why"], rows[name]
    composed = [r for n, r in rows.items() if n not in expected]
    kept = [r for r in composed if r["dropped_by"] is None]
    assert len(kept) >= 0.7 * COMPOSED, [(r["name"], r["dropped_by"], r["why"]) for r in composed if r["dropped_by"]]
    assert all(r["why"] for r in composed if r["dropped_by"])  # every drop explained
    assert all(r["runtime_ms"] > 0 for r in kept)
    assert sorted(p.stem for p in (tmp_path / "out" / "tasks").glob("*.py")) == sorted(r["name"] for r in kept)
    assert rows["near_copy_softmax"]["similarity"]["closest"] == "softmax"


def _running_out_of_memory(marker: Path | None) -> str:
    """A task whose forward raises torch's out-of-memory error: the first time only (when `marker` names a file that
    records it), or always."""
    once = f"if os.path.exists({str(marker)!r}):\n            return x * 2\n        open({str(marker)!r}, 'w').close()"
    return f"""import os
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        {once if marker else ""}
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_out_of_memory_beside_other_workers_is_tried_again_alone(tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "crowded_out.py").write_text(_running_out_of_memory(tmp_path / "ran-out-once"))
    (folder / "too_big.py").write_text(_running_out_of_memory(None))
    config = FilterConfig(slots=[None, None], compile_backend="off", timeout_s=60)
    rows = {r["name"]: r for r in Pipeline(config, tmp_path / "out").run(sorted(folder.glob("*.py")))}
    assert (tmp_path / "ran-out-once").exists()  # the first attempt did run out
    assert rows["crowded_out"]["dropped_by"] is None, rows["crowded_out"]
    assert rows["too_big"]["dropped_by"] == "runs"
    assert rows["too_big"]["why"].startswith("needs more device memory than the device has, alone on it")


def test_similarity_sees_through_renames_and_sizes_but_not_different_ops():
    softmax, layernorm = (EXAMPLES / "softmax.py").read_text(), (EXAMPLES / "layernorm.py").read_text()
    assert similarity(fingerprint(softmax), fingerprint(_near_copy(softmax))) >= 0.9
    assert similarity(fingerprint(softmax), fingerprint(layernorm)) < 0.9
    assert fingerprint(softmax).digest == fingerprint(softmax.replace("4096", "1024")).digest  # a duplicate
    refs = {p.stem: fingerprint(p.read_text()) for p in EXAMPLES.glob("*.py")}
    assert most_similar(fingerprint(_near_copy(softmax)), refs)[0] == "softmax"


@pytest.mark.slow
def test_a_killed_filter_run_resumes_without_losing_or_repeating_a_task(tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    for seed in range(6):
        c = compose(100 + seed, max_ops=2)
        (folder / f"{c.name}.py").write_text(c.source)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "cudagent", "data", "filter", str(folder), "--out", str(out), "--device", "cpu"]
    argv += ["--compile", "aot_eager", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (out / "filter.jsonl").is_file():
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = (out / "filter.jsonl").read_text().splitlines()
    assert 1 <= len(before) < 6
    done = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(x) for x in (out / "filter.jsonl").read_text().splitlines()]
    assert sorted(r["name"] for r in rows) == sorted(p.stem for p in folder.glob("*.py"))  # each exactly once
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["event"] == "summary" and summary["tasks"] == 6
    assert (out / "report.md").read_text().startswith("# Dataset filter report")


@pytest.mark.parametrize(
    "args, message",
    [
        (["synth", "--out", "X", "--max-ops", "9"], "must be 1 to 5"),
        (["synth", "--out", "X", "--scale", "tpu"], "use cpu"),
        (["filter", "NOPE", "--out", "X"], "is not a directory"),
        (["filter", "EMPTY", "--out", "X"], "no task files"),
        (["filter", "EX", "--out", "X", "--runtime-ms", "5"], "give LO,HI"),
    ],
)
def test_bad_input_is_one_sentence(tmp_path, args, message):
    (tmp_path / "EMPTY").mkdir()
    args = [str(EXAMPLES) if a == "EX" else str(tmp_path / a) if a in ("X", "NOPE", "EMPTY") else a for a in args]
    proc = subprocess.run([sys.executable, "-m", "cudagent", "data", *args], capture_output=True, text=True)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.slow
def test_import_finds_the_code_column_and_export_writes_what_optimize_would_send(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cudagent.agent.environment import open_episode
    from cudagent.agent.episode import EpisodeLimits
    from cudagent.device.info import resolve_device
    from cudagent.evaluator.local import environment
    from cudagent.task import Task
    from cudagent.workspace import Workspace

    class DescribedPort:
        """What an episode reads of its evaluator port to open: this CPU, no cached baselines."""

        def describe(self):
            return {"env": environment(resolve_device("cpu")), "baselines": None}

        def device(self):
            return resolve_device("cpu").to_dict()

    # a published set whose code column has an unexpected name, with one row of non-code
    rows = [{"op_name": f"op {i}", "pytorch_code": compose(i).source, "level": 1} for i in range(5)]
    rows.append({"op_name": "broken", "pytorch_code": "not python (", "level": 1})
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "ops6k.parquet")
    (tmp_path / "ops6k.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    for name in ("ops6k.parquet", "ops6k.jsonl"):
        out = tmp_path / f"imported-{name}"
        argv = [sys.executable, "-m", "cudagent", "data", "import", str(tmp_path / name), "--out", str(out)]
        proc = subprocess.run(argv, capture_output=True, text=True)
        assert proc.returncode == 0 and "column 'pytorch_code'" in proc.stderr and "1 rows" in proc.stderr, proc.stderr
        assert sorted(p.name for p in out.glob("*.py")) == [f"op_{i}.py" for i in range(5)]
    (tmp_path / "nocode.json").write_text(json.dumps([{"a": "x", "b": 1}]))
    proc = subprocess.run([sys.executable, "-m", "cudagent", "data", "import", str(tmp_path / "nocode.json"), "--out",
                           str(tmp_path / "x")], capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and "its columns are: a, b" in proc.stderr

    # export to verl, read back with pyarrow: each prompt is the opening an optimize episode sends
    ws = Workspace.create(tmp_path / "ws", "")
    tasks = tmp_path / "imported-ops6k.parquet"
    parquet = tmp_path / "train.parquet"
    argv = [sys.executable, "-m", "cudagent", "data", "export", str(tasks), "--out", str(parquet), "--device", "cpu"]
    proc = subprocess.run([*argv, "--workspace", str(ws.root)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    table = pq.read_table(parquet).to_pylist()
    assert len(table) == 5 and {r["agent_name"] for r in table} == {"cudagent_agent"}
    for row in table:
        source = row["extra_info"]["task_source"]
        assert source == (tasks / f"{row['extra_info']['task_id']}.py").read_text()
        task = Task(row["extra_info"]["task_id"], source)
        episode = open_episode(task, ws, DescribedPort(), EpisodeLimits(), "text")  # text: the token driver's
        assert row["prompt"] == episode.messages


def test_the_model_composes_tasks_and_bad_answers_are_dropped_with_a_reason(tmp_path):
    from tests.agent.script_server import ScriptedServer

    good = compose(3).source
    answers = iter(
        [
            {"text": f"Here is the task:\n```python\n{good}```\n"},
            {"text": "I cannot help with that."},
            {"text": "```python\nclass Model(:\n```"},
            {"status": 500, "body": {"error": {"message": "overloaded"}}},
        ]
    )
    fallback = {"text": f"```python\n{good}```"}
    with ScriptedServer(lambda i, messages: next(answers, fallback)) as server:
        argv = [sys.executable, "-m", "cudagent", "data", "synth", "--out", str(tmp_path / "llm"), "--count", "5"]
        argv += ["--model", "scripted-model", "--base-url", server.url, "--seed", "11"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        prompt = server.chat_requests[0]["messages"][0]["content"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "llm" / "synth.jsonl").read_text().splitlines()]
    assert len(rows) == 5
    assert rows[0]["file"] and "the request failed" not in json.dumps(rows[:3])
    assert "holds no task file" in rows[1]["dropped"] and "holds no task file" in rows[2]["dropped"]
    written = sorted(p.name for p in (tmp_path / "llm").glob("*.py"))
    assert len(written) == sum(1 for r in rows if r.get("file")) >= 2
    assert all(static_reason((tmp_path / "llm" / w).read_text()) is None for w in written)
    for op in rows[0]["ops"]:  # the prompt showed the drawn seeds
        assert f"Seed 1: {rows[0]['ops'][0]}" in prompt and op in prompt
    assert "wrote" in proc.stderr and "answers without usable code" in proc.stderr


@pytest.mark.slow
def test_a_weak_real_model_does_not_break_the_pipeline(tmp_path, model_server):
    argv = [sys.executable, "-m", "cudagent", "data", "synth", "--out", str(tmp_path / "llm"), "--count", "1"]
    argv += ["--model", model_server.model, "--base-url", model_server.url, "--max-ops", "2", "--reply-tokens", "160"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "llm" / "synth.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and all(r.get("file") or r.get("dropped") for r in rows)
    files = list((tmp_path / "llm").glob("*.py"))
    if files:  # whatever it wrote goes through the filters without breaking them
        config = FilterConfig(runtime_ms=(0.0, 1e6), compile_backend="aot_eager", timeout_s=60)
        result = Pipeline(config, tmp_path / "out").run(files)
        assert all(r.get("dropped_by") is None or r["why"] for r in result)


def test_a_users_model_gives_a_seed_per_leaf_module_and_transformers_blocks_are_seeds(tmp_path):
    from cudagent.data.seeds import from_module, transformers_seeds

    seeds, skipped = from_module(Path(__file__).parent / "user_model.py")
    names = sorted(s.name for s in seeds)
    assert names == [f"user_model_{n}" for n in ("conv1d", "embedding", "gelu", "layernorm", "linear", "linear_2")]
    assert skipped == []
    by_name = {s.name: s.source for s in seeds}
    assert "nn.GELU(approximate='tanh')" in by_name["user_model_gelu"]  # the arguments the model used
    assert "torch.randn(4, 64, 256)" in by_name["user_model_layernorm"]  # the shape it saw
    assert "dtype=torch.int64" in by_name["user_model_embedding"]
    for seed in seeds + transformers_seeds():
        path = tmp_path / f"{seed.name}.py"
        path.write_text(seed.source)
        assert static_reason(seed.source) is None, seed.name
        validate_task(load_task(path), "cpu")
    assert len(transformers_seeds()) == 5
