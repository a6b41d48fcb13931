"""Datasets in and out: import published task sets (CUDA-Agent-Ops-6K as parquet, JSON or JSON lines; a KernelBench
checkout) into a folder of task files, and export a folder as verl's training parquet or as tasks for the bench.

The column that holds a task's code is found by looking, not by name: the first string column whose values parse as
Python and define `class Model`, `get_inputs` and `get_init_inputs`. A file without one fails with the columns it
has.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
from pathlib import Path

from cudagent.errors import CudagentError
from cudagent.syntax import parse

AGENT_NAME = "cudagent_agent"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def read_records(path: Path) -> list[dict]:
    """The rows of a parquet, JSON (a list of objects) or JSON-lines file."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise CudagentError("reading .parquet needs pyarrow: pip install 'cudagent[data]'") from None
        return pq.read_table(path).to_pylist()
    text = path.read_text()
    if suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    if isinstance(data, dict):  # {"data": [...]} or {"train": [...]}
        data = next((v for v in data.values() if isinstance(v, list)), [data])
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise CudagentError(f"{path} holds no list of records (objects)")
    return data


def is_task_code(value: object) -> bool:
    if not isinstance(value, str) or "Model" not in value:
        return False
    try:
        tree = parse(value)
    except SyntaxError:
        return False
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    return {"Model", "get_inputs", "get_init_inputs"} <= names


def code_column(records: list[dict], path: Path) -> str:
    """The column holding task code: the one whose sampled values are task files most often."""
    columns = sorted({k for r in records for k in r})
    sample = records[:50]
    scores = {c: sum(is_task_code(r.get(c)) for r in sample) for c in columns}
    best = max(columns, key=lambda c: scores[c], default=None)
    if best is None or scores[best] == 0:
        raise CudagentError(
            f"no column of {path.name} holds task code (a Model class with get_inputs and get_init_inputs); its "
            f"columns are: {', '.join(columns) or 'none'}"
        )
    return best


def import_records(path: Path, out: Path) -> tuple[int, int, str]:
    """Write every row's task code to OUT/<name>.py; returns (written, skipped, the code column)."""
    records = read_records(path)
    column = code_column(records, path)
    name_column = next((c for c in ("name", "task_name", "id", "op_name", "problem_id") if c in records[0]), None)
    out.mkdir(parents=True, exist_ok=True)
    written = skipped = 0
    used: set[str] = set()
    for i, record in enumerate(records):
        code = record.get(column)
        if not is_task_code(code):
            skipped += 1
            continue
        stem = _SAFE.sub("_", str(record.get(name_column) or "")).strip("_")[:80] if name_column else ""
        stem = stem or f"task_{i:05d}"
        if stem in used or not stem[0].isalpha():
            stem = f"t{i:05d}_{stem}"
        used.add(stem)
        (out / f"{stem}.py").write_text(code)
        written += 1
    return written, skipped, column


def import_folder(source: Path, out: Path, levels: list[str] | None = None) -> int:
    """A KernelBench checkout (or any folder of task files) copied into the task-folder form."""
    from cudagent.bench.tasks import discover

    out.mkdir(parents=True, exist_ok=True)
    tasks = discover(source, levels)
    for t in tasks:
        name = t.name if t.level == "-" else f"level{t.level}_{t.name}"
        shutil.copyfile(t.path, out / f"{_SAFE.sub('_', name)}.py")
    return len(tasks)


def verl_rows(tasks: list[Path], data_source: str, env: dict, device_kind: str, workspace: str) -> list[dict]:
    """verl's training rows: the chat prompt optimize would open with in token mode, the agent loop's name, the task
    in extra_info. The loop (cudagent.train) builds its episode from extra_info and renders the opening itself, with
    the evaluator's baselines of the device it runs on; `prompt` is what verl's dataset reads (its length filter)."""
    from cudagent.agent.episode import EpisodeLimits, TaskInfo, opening_messages
    from cudagent.agent.prompting import Prompts, load_skills

    prompts, skills, limits = Prompts(), load_skills(device_kind), EpisodeLimits()
    rows = []
    for i, path in enumerate(tasks):
        source = path.read_text()
        # the text action format: training steps episodes with the token driver, which parses actions from the text
        messages = opening_messages(prompts, TaskInfo(path.stem, source), env, skills, limits, "text", workspace)
        rows.append(
            {
                "data_source": data_source,
                "agent_name": AGENT_NAME,
                "prompt": messages,
                "ability": "cuda-kernel" if device_kind == "cuda" else "cpu-kernel",
                "reward_model": {"style": "rule", "ground_truth": ""},
                "extra_info": {
                    "index": i,
                    "task_id": path.stem,
                    "task_source": source,
                    "task_sha256": hashlib.sha256(source.encode()).hexdigest(),
                },
            }
        )
    return rows


def write_parquet(rows: list[dict], path: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CudagentError("writing .parquet needs pyarrow: pip install 'cudagent[data]'") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)
