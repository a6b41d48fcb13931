"""The agent's tools. Each call returns an Observation: the concise text the model reads, the full text the
trajectory keeps, and structured data (the evaluator's verdict) the episode uses. `compile`, `verify` and
`profile` send a snapshot of the agent's files to the evaluator port (evaluator/port.py), which never builds or
judges this live directory; the shell runs in a worker thread, so many episodes can share one event loop.

A call's arguments are checked against the tool's schema first (arguments.py). Every path is relative to the
workspace and is opened beneath it, never through a link (boundary/paths.py); the reference, the fixed
infrastructure and the build directory are read-only to the agent. The shell runs in the workspace under the run's
sandbox (boundary/shell.py); fixed files it changes anyway (outside bubblewrap) are restored at once. Whatever goes
wrong inside a call is that call's observation: a tool call can fail, the run cannot.
"""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from cudagent.agent.arguments import BadArguments, checked
from cudagent.boundary.paths import Beneath, PathRefused
from cudagent.boundary.shell import Sandbox
from cudagent.evaluator.port import EvaluatorPort, EvaluatorUnavailable, SnapshotError, snapshot_of
from cudagent.evaluator.verdict import Verdict
from cudagent.workspace import BUILD, INFRA_FILES, MODEL, Workspace

DEFAULT_BASH_TIMEOUT_S = 120
MAX_BASH_TIMEOUT_S = 1800
MODEL_HEAD_CHARS = 6000  # what the model sees of a long output: head and tail
MODEL_TAIL_CHARS = 4000
READ_LIMIT_LINES = 2000
MAX_READ_BYTES = 64 << 20
PROTECTED = (MODEL, *INFRA_FILES)
EVALUATING = ("compile", "verify", "profile")  # the calls that go to the evaluator

TOOL_SPECS: list[dict] = [
    {
        "name": "bash",
        "description": "Run a shell command in the workspace (bash -c). Output is stdout and stderr merged.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the command line"},
                "timeout": {
                    "type": "integer",
                    "description": f"seconds, default {DEFAULT_BASH_TIMEOUT_S}",
                    "minimum": 1,
                    "maximum": MAX_BASH_TIMEOUT_S,
                },
            },
            "required": ["command"],
        },
    },
    {
        "name": "read_file",
        "description": "Read a text file of the workspace, with line numbers; optionally only lines start..end.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "start_line": {"type": "integer", "description": "first line, from 1", "minimum": 1},
                "end_line": {"type": "integer", "description": "last line, inclusive", "minimum": 1},
            },
            "required": ["path"],
        },
    },
    {
        "name": "write_file",
        "description": "Create or overwrite a file of the workspace (e.g. model_new.py, kernels/x.cu).",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    {
        "name": "edit_file",
        "description": "Replace one exact, unique occurrence of old_str by new_str in a file of the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "old_str": {"type": "string"}, "new_str": {"type": "string"}},
            "required": ["path", "old_str", "new_str"],
        },
    },
    {
        "name": "compile",
        "description": "Build the extension from kernels/ (incremental); report the first compiler errors.",
        "parameters": {"type": "object", "properties": {}},
    },
    {
        "name": "verify",
        "description": "Build, audit and check ModelNew against the reference on fresh random inputs (no timing).",
        "parameters": {"type": "object", "properties": {}},
    },
    {
        "name": "profile",
        "description": "Verify, then time ModelNew against eager and torch.compile: reward tier, speedups, "
        "where the time goes and how far from the hardware limit.",
        "parameters": {"type": "object", "properties": {}},
    },
    {
        "name": "finish",
        "description": "End the run. The best verified kernel of the run is kept whatever the current files hold.",
        "parameters": {
            "type": "object",
            "properties": {"summary": {"type": "string", "description": "what you built and what you found"}},
        },
    },
]
TOOL_NAMES = {t["name"] for t in TOOL_SPECS}


def openai_tools() -> list[dict]:
    return [{"type": "function", "function": spec} for spec in TOOL_SPECS]


@dataclass
class Observation:
    text: str  # what the model reads
    full_text: str | None = None  # when the model's text was cut: everything, for the trajectory
    ok: bool = True
    verdict: Verdict | None = None  # verify / profile: the evaluator's verdict
    done: bool = False  # finish
    seconds: float = 0.0
    data: dict = field(default_factory=dict)


class ToolRefused(Exception):
    """A call the agent may not make (a path outside the workspace, a protected file); the message says why."""


class Toolbox:
    def __init__(
        self,
        ws: Workspace,
        task_source: str,
        evaluator: EvaluatorPort | None,
        sandbox: Sandbox | None = None,
        read_only: tuple[Path, ...] = (),
    ):
        self.ws, self.task_source = ws, task_source
        self.evaluator = evaluator
        self.tree = Beneath(ws.root)  # where model-named paths are opened: beneath the workspace, no link followed
        self.sandbox = sandbox or Sandbox("none")
        # what the shell may not change: the fixed files, build/, and the checkout's git link (`read_only`)
        self.read_only = [ws.root / name for name in (*PROTECTED, BUILD, ".git")] + list(read_only)

    async def run(self, name: str, args: dict) -> Observation:
        """Run one call. Whatever goes wrong inside becomes the observation: a refusal, a failure of the machine,
        or an error of cudagent itself (its traceback kept in `data["traceback"]` for the run's folder)."""
        start = time.monotonic()
        if name not in TOOL_NAMES:
            return Observation(f"there is no tool {name!r}; use one of {', '.join(sorted(TOOL_NAMES))}", ok=False)
        try:
            method = getattr(self, f"_tool_{name}")
            accepted = checked(next(t for t in TOOL_SPECS if t["name"] == name), args)
            if asyncio.iscoroutinefunction(method):
                obs = await method(**accepted)
            else:
                obs = method(**accepted)
        except BadArguments as exc:
            obs = Observation(f"bad arguments for {name}: {exc}", ok=False)
        except (ToolRefused, PathRefused, SnapshotError) as exc:
            obs = Observation(f"refused: {exc}", ok=False)
        except EvaluatorUnavailable as exc:
            obs = Observation(f"{name} failed, nothing was judged: {exc.message}", ok=False)
            obs.data["evaluator_failed"] = True
        except (OSError, UnicodeError) as exc:
            obs = Observation(f"{name} failed: {exc}", ok=False)
        except Exception as exc:  # noqa: BLE001  (a tool call can fail; the run cannot)
            obs = Observation(
                f"{name} failed inside cudagent ({type(exc).__name__}: {exc}); this is not your doing, and it is "
                "logged: go on, or try another way",
                ok=False,
                data={"traceback": traceback.format_exc(), "evaluator_failed": name in EVALUATING},
            )
        obs.seconds = time.monotonic() - start
        return obs

    # ----- paths ----------------------------------------------------------------------------------------------

    def _path(self, path: str, write: bool) -> PurePosixPath:
        """`path` checked: inside the workspace (it is then opened there without following links: tree), and for
        writing, not a fixed file."""
        rel = self.tree.relative(path)
        if rel == PurePosixPath("."):
            raise ToolRefused(f"{path} is the workspace itself; name a file in it")
        if write:
            if str(rel) in PROTECTED:
                raise ToolRefused(
                    f"{rel} is fixed (the reference or the build infrastructure) and read-only; "
                    "write your code in model_new.py and kernels/"
                )
            if rel.parts[0] in (BUILD, ".git"):
                raise ToolRefused(f"{rel.parts[0]}/ belongs to cudagent; write your code in model_new.py and kernels/")
        return rel

    def _read_text(self, rel: PurePosixPath, path: str) -> str | Observation:
        kind = self.tree.kind(rel)
        if kind != "file":
            what = {None: "does not exist", "dir": "is a folder", "link": "is a symbolic link (links are not followed)"}
            return Observation(f"{path} {what.get(kind, 'is not a regular file')}", ok=False)
        return self.tree.read_bytes(rel, limit=MAX_READ_BYTES).decode("utf-8", errors="replace")

    # ----- tools ----------------------------------------------------------------------------------------------

    async def _tool_bash(self, command: str, timeout: int | None = None) -> Observation:
        if not command.strip():
            return Observation("give a command to run", ok=False)
        limit = DEFAULT_BASH_TIMEOUT_S if timeout is None else timeout
        cancel = threading.Event()
        try:
            result = await asyncio.to_thread(
                self.sandbox.run, command, self.ws.root, self.read_only, timeout_s=limit, cancel=cancel
            )
        except (asyncio.CancelledError, KeyboardInterrupt):
            cancel.set()  # the worker thread kills the command's whole tree at once
            raise
        text = result.output
        if result.timed_out:
            text += f"\n[the command ran past {limit} s and was killed with everything it started]"
        elif result.killed_for:
            text += f"\n[the command {result.limit_message}]"
        else:
            text += f"\n[exit code {result.returncode}]"
        restored = self.ws.ensure_infrastructure(self.task_source)
        if restored:
            text += f"\n[{', '.join(restored)} changed or deleted; restored: these files are read-only to you]"
        return clip(text, ok=not result.timed_out and not result.killed_for and result.returncode == 0)

    def _tool_read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> Observation:
        text = self._read_text(self._path(path, write=False), path)
        if isinstance(text, Observation):
            return text
        lines = text.splitlines()
        first = start_line or 1
        last = min(len(lines), end_line or len(lines), first + READ_LIMIT_LINES - 1)
        body = "\n".join(f"{i:6d}  {lines[i - 1]}" for i in range(first, last + 1))
        more = f"\n[lines {last + 1}-{len(lines)} not shown: ask with start_line]" if last < len(lines) else ""
        return clip(f"{path} ({len(lines)} lines)\n{body}{more}")

    def _tool_write_file(self, path: str, content: str) -> Observation:
        rel = self._path(path, write=True)
        existed = self.tree.write_bytes(rel, content.encode("utf-8", errors="surrogateescape"))
        n = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        return Observation(f"{'overwrote' if existed else 'created'} {path} ({n} lines)")

    def _tool_edit_file(self, path: str, old_str: str, new_str: str) -> Observation:
        rel = self._path(path, write=True)
        if self.tree.kind(rel) is None:
            return Observation(f"{path} does not exist; create it with write_file", ok=False)
        text = self._read_text(rel, path)
        if isinstance(text, Observation):
            return text
        if not old_str:
            return Observation("old_str must be the exact, non-empty text to replace", ok=False)
        count = text.count(old_str)
        if count == 0:
            return Observation(f"old_str was not found in {path}; read the file and copy the text exactly", ok=False)
        if count > 1:
            return Observation(
                f"old_str occurs {count} times in {path}; include more context to make it unique", ok=False
            )
        self.tree.write_bytes(rel, text.replace(old_str, new_str, 1).encode("utf-8", errors="surrogateescape"))
        line = text[: text.index(old_str)].count("\n") + 1
        return Observation(f"edited {path} at line {line}")

    async def _tool_compile(self) -> Observation:
        self.ws.ensure_infrastructure(self.task_source)
        result = await self.evaluator.build(snapshot_of(self.ws))
        if result.ok:
            return Observation(f"build OK ({result.seconds:.1f} s)", data={"build": result.to_dict()})
        head = "build TIMED OUT" if result.timed_out else "build FAILED"
        return clip(
            f"{head} ({result.seconds:.1f} s)\n{result.errors or ''}", ok=False, data={"build": result.to_dict()}
        )

    async def _tool_verify(self) -> Observation:
        return await self._evaluate(timing=False)

    async def _tool_profile(self) -> Observation:
        return await self._evaluate(timing=True)

    async def _evaluate(self, timing: bool) -> Observation:
        self.ws.ensure_infrastructure(self.task_source)
        snapshot = snapshot_of(self.ws)
        verdict = await self.evaluator.evaluate(snapshot, timing=timing)
        obs = clip(verdict.summary(detail=timing), ok=verdict.correct)
        obs.verdict = verdict
        obs.data["snapshot"] = snapshot  # exactly the files judged: the episode keeps them if they are the best
        return obs

    def _tool_finish(self, summary: str = "") -> Observation:
        return Observation("finished", done=True, data={"summary": str(summary)})


def clip(text: str, ok: bool = True, data: dict | None = None) -> Observation:
    """Head and tail for the model when `text` is long; the whole of it kept for the trajectory."""
    if len(text) <= MODEL_HEAD_CHARS + MODEL_TAIL_CHARS:
        return Observation(text, ok=ok, data=data or {})
    omitted = len(text) - MODEL_HEAD_CHARS - MODEL_TAIL_CHARS
    short = (
        f"{text[:MODEL_HEAD_CHARS]}\n[... {omitted} characters omitted; narrow the command (grep, head) "
        f"to see them ...]\n{text[-MODEL_TAIL_CHARS:]}"
    )
    return Observation(short, full_text=text, ok=ok, data=data or {})
