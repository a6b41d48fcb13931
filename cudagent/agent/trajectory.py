"""The run directory and the trajectory in it.

    <runs>/<run-id>/
        trajectory.jsonl   a header line, then one line per finished turn, then an end line per ending
        outputs/           full tool outputs too long for the model (the model saw head and tail)
        errors/            tracebacks of tool calls that failed inside cudagent (the model saw one sentence)
        worktree/ or repo/ the run's git checkout (gitrun.py)

A turn line is appended and flushed to disk only after the turn's commit, and it carries the branch head and the
loop's counters after the turn, so the file alone rebuilds the run: `--resume` replays it, resets the branch to
the last recorded head and goes on. A line cut short by a kill is ignored. <runs> is $CUDAGENT_HOME/runs
(default ~/.local/share/cudagent/runs; settings.py), given to these functions by the CLI.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cudagent.agent.policy import PolicyReply
from cudagent.errors import CudagentError

TRAJECTORY = "trajectory.jsonl"


def new_run_id(task_stem: str) -> str:
    """`<task>-<date>-<time>-<6 hex>`: readable, sortable, and unique however many episodes start in a second."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in task_stem)[:60] or "task"
    return f"{safe}-{stamp}-{uuid.uuid4().hex[:6]}"


def find_run(ref: str, root: Path) -> Path:
    """A run directory under `root` from a run id, a prefix of one, `last`, or a path."""
    if ref == "last":
        runs = list_runs(root)
        if not runs:
            raise CudagentError(f"there are no runs under {root} yet; start one with `cudagent optimize TASK`")
        return runs[-1]
    for candidate in (Path(ref).expanduser(), root / ref):
        if (candidate / TRAJECTORY).is_file():
            return candidate.resolve()
    matches = [p for p in list_runs(root) if p.name.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise CudagentError(f"{ref!r} matches {len(matches)} runs; give more of the run id (see `cudagent runs`)")
    raise CudagentError(f"no run {ref!r} under {root}; `cudagent runs` lists them")


def list_runs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if (p / TRAJECTORY).is_file() and read_header(p)]
    return sorted(runs, key=lambda p: (read_header(p).get("created", 0), p.name))


def read_header(run_dir: Path) -> dict:
    """The run's header; {} when a kill cut it short (such a run never started and cannot resume)."""
    try:
        with open(run_dir / TRAJECTORY) as f:
            return json.loads(f.readline())
    except (OSError, json.JSONDecodeError):
        return {}


@dataclass
class Trajectory:
    run_dir: Path
    header: dict
    turns: list[dict] = field(default_factory=list)
    ends: list[dict] = field(default_factory=list)
    resumes: list[dict] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.run_dir / TRAJECTORY

    @classmethod
    def create(cls, run_dir: Path, header: dict) -> Trajectory:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "outputs").mkdir(exist_ok=True)
        t = cls(run_dir, {"kind": "run", "version": 1, **header})
        _append(t.path, t.header)
        return t

    @classmethod
    def load(cls, run_dir: Path) -> Trajectory:
        lines = (run_dir / TRAJECTORY).read_bytes().split(b"\n")
        records = []
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                records.append(json.loads(raw))
            except json.JSONDecodeError:
                if i < len(lines) - 2:  # only the last line may be cut short (a kill while writing)
                    raise CudagentError(
                        f"{run_dir / TRAJECTORY} is damaged at line {i + 1}; the run cannot resume"
                    ) from None
        if not records or records[0].get("kind") != "run":
            raise CudagentError(f"{run_dir / TRAJECTORY} has no header; it is not a cudagent run")
        t = cls(run_dir, records[0])
        for r in records[1:]:
            if r.get("kind") == "turn":
                t.turns.append(r)
            elif r.get("kind") == "resume":
                t.resumes.append(r)
            else:
                t.ends.append(r)
        t._drop_cut_line()
        return t

    def _drop_cut_line(self) -> None:
        """Rewrite the file without a trailing fragment, so that later appends start on a fresh line."""
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data[: data.rfind(b"\n") + 1]
            tmp = self.path.with_suffix(".tmp")
            tmp.write_bytes(keep)
            os.replace(tmp, self.path)

    def add_turn(self, record: dict) -> None:
        record = {"kind": "turn", **record}
        _append(self.path, record)
        self.turns.append(record)

    def add_end(self, record: dict) -> None:
        record = {"kind": "end", **record}
        _append(self.path, record)
        self.ends.append(record)

    def add_resume(self, record: dict) -> None:
        record = {"kind": "resume", **record}
        _append(self.path, record)
        self.resumes.append(record)

    @property
    def limits(self) -> dict:
        """The limits in force: the header's, as changed by the latest resume."""
        return self.resumes[-1]["limits"] if self.resumes else self.header["limits"]

    def save_output(self, turn: int, index: int, text: str, kind: str = "outputs") -> str:
        """A long output (or, kind "errors", the traceback of a tool call that failed inside cudagent) in a file
        of its own; its name relative to the run's folder."""
        name = f"{kind}/turn-{turn:04d}-{index}.txt"
        (self.run_dir / kind).mkdir(exist_ok=True)
        (self.run_dir / name).write_text(text)
        return name

    def messages(self) -> list[dict]:
        """The whole conversation: the opening messages and every message each turn added."""
        out = list(self.header["messages"])
        for t in self.turns:
            out.extend(t["messages"])
        return out

    @property
    def last_state(self) -> dict:
        return self.turns[-1]["state"] if self.turns else self.header["state"]


def _append(path: Path, record: dict) -> None:
    line = json.dumps(record, default=str, separators=(",", ":")) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def reply_record(reply: PolicyReply) -> dict:
    """What the trajectory keeps of a reply: text, calls, usage, timing and, from token-level policies, the ids."""
    record = {
        "content": reply.content,
        "tool_calls": [c.to_dict() for c in reply.tool_calls],
        "usage": asdict(reply.usage),
        "seconds": round(reply.seconds, 3),
        "finish_reason": reply.finish_reason,
        "format_error": reply.format_error,
        "attempts": reply.attempts,
    }
    if reply.token_ids is not None:
        record["token_ids"] = reply.token_ids
        record["logprobs"] = reply.logprobs
    return record
