"""The evaluator as an episode sees it: build and evaluate snapshots of the files an agent owns.

A snapshot is `{relative path: bytes}` of model_new.py and the sources under kernels/; the reference and the fixed
infrastructure never travel, since the evaluator has its own pristine copies. The port never judges an agent's live
directory: the local implementation writes each snapshot into a scratch workspace of its own (only the files that
changed, so builds stay incremental for the episode) and evaluates that. A remote implementation (the service of
`cudagent serve`) fits the same protocol: verdicts and build results round-trip through JSON.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Protocol, runtime_checkable

from cudagent.build.extension import BuildResult
from cudagent.errors import EnvironmentProblem
from cudagent.evaluator.evaluator import EvalOptions, Evaluator
from cudagent.evaluator.verdict import Verdict
from cudagent.device.info import DeviceInfo
from cudagent.task import Task
from cudagent.workspace import KERNELS, MODEL_NEW, SOURCE_SUFFIXES, Workspace

Snapshot = dict[str, bytes]
MAX_SNAPSHOT_BYTES = 16 << 20


class SnapshotError(ValueError):
    """A snapshot names a file an agent does not own, or is too large."""


class EvaluatorUnavailable(EnvironmentProblem):
    """The evaluator could not be reached or could not answer (a remote service down for longer than its clients
    wait, a worker that faulted): the call judged nothing. A tool call that meets it fails; the episode goes on."""


def snapshot_of(ws: Workspace) -> Snapshot:
    """The files of `ws` an agent owns: model_new.py and the sources under kernels/."""
    files: Snapshot = {}
    if ws.model_new_py.is_file():
        files[MODEL_NEW] = ws.model_new_py.read_bytes()
    for path in ws.kernel_sources():
        files[path.relative_to(ws.root).as_posix()] = path.read_bytes()
    return files


def check_snapshot(snapshot: Snapshot) -> None:
    """Every path is model_new.py or a source file under kernels/, with no way out of the directory."""
    total = 0
    for rel, data in snapshot.items():
        parts = Path(rel).parts
        ok = rel == MODEL_NEW or (
            len(parts) >= 2
            and parts[0] == KERNELS
            and not Path(rel).is_absolute()
            and ".." not in parts
            and Path(rel).suffix in SOURCE_SUFFIXES
        )
        if not ok or "\\" in rel:
            raise SnapshotError(f"{rel!r} is not a file an agent owns (model_new.py, or a source under kernels/)")
        total += len(data)
    if total > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(f"the snapshot holds {total} bytes; at most {MAX_SNAPSHOT_BYTES} are accepted")


def write_snapshot(snapshot: Snapshot, ws: Workspace) -> None:
    """Make `ws` hold exactly the snapshot's agent-owned files; unchanged files keep their times (ninja)."""
    check_snapshot(snapshot)
    wanted = {ws.root / rel for rel in snapshot}
    for stale in ws.kernel_sources() + ([ws.model_new_py] if ws.model_new_py.exists() else []):
        if stale not in wanted:
            stale.unlink()
    for rel, data in snapshot.items():
        target = ws.root / rel
        if target.is_file() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(data)
        tmp.replace(target)


@runtime_checkable
class EvaluatorPort(Protocol):
    async def build(self, snapshot: Snapshot) -> BuildResult:
        """Build the snapshot's extension (incrementally, within one episode)."""

    async def evaluate(self, snapshot: Snapshot, timing: bool, fresh: bool = False) -> Verdict:
        """Verify (and with `timing`, time) the snapshot; `fresh`: in a new directory with a clean build."""

    def describe(self) -> dict:
        """What the prompts say about where kernels run: {"env": {gpu, arch, device, cuda, torch},
        "baselines": cached baseline medians or None}."""

    async def close(self) -> None:
        """Give back what the port holds (processes, scratch directories)."""


class LocalEvaluator:
    """The evaluator on this machine, behind the port. One per episode: evaluations of one port run one at a time
    (its scratch workspace is one directory); many ports may evaluate at once."""

    def __init__(
        self,
        task: Task,
        device: DeviceInfo,
        options: EvalOptions | None = None,
        evaluator: Evaluator | None = None,
        scratch_root: Path | None = None,
    ):
        self.task, self.device = task, device
        self.evaluator = evaluator or Evaluator(task, device, options)  # validates the task
        self._owns_evaluator = evaluator is None
        self._dir = Path(tempfile.mkdtemp(prefix="cudagent-eval-", dir=scratch_root))
        self.workspace = Workspace.create(self._dir / "ws", task.source)
        self._lock = asyncio.Lock()

    async def build(self, snapshot: Snapshot) -> BuildResult:
        async with self._lock:
            return await asyncio.to_thread(self._build, snapshot)

    async def evaluate(self, snapshot: Snapshot, timing: bool, fresh: bool = False) -> Verdict:
        async with self._lock:
            return await asyncio.to_thread(self._evaluate, snapshot, timing, fresh)

    def describe(self) -> dict:
        return {"env": environment(self.device), "baselines": self.evaluator.baselines.cached_medians()}

    async def close(self) -> None:
        if self._owns_evaluator:
            await asyncio.to_thread(self.evaluator.close)
        shutil.rmtree(self._dir, ignore_errors=True)

    # ----- blocking work, in a thread ----------------------------------------------------------------------------

    def _build(self, snapshot: Snapshot) -> BuildResult:
        write_snapshot(snapshot, self.workspace)
        self.workspace.ensure_infrastructure(self.task.source)
        return self.evaluator.build(self.workspace)

    def _evaluate(self, snapshot: Snapshot, timing: bool, fresh: bool) -> Verdict:
        if not fresh:
            write_snapshot(snapshot, self.workspace)
            return self.evaluator.evaluate(self.workspace, timing=timing)
        with tempfile.TemporaryDirectory(prefix="fresh-", dir=self._dir) as tmp:
            ws = Workspace.create(Path(tmp) / "ws", self.task.source)
            write_snapshot(snapshot, ws)
            return self.evaluator.evaluate(ws, timing=timing)


def environment(device: DeviceInfo) -> dict:
    """What the prompts say about the machine kernels run on."""
    if device.is_cuda:
        return {
            "gpu": device.name,
            "arch": device.arch,
            "device": "cuda",
            "cuda": device.cuda_version or "?",
            "torch": device.torch_version,
        }
    return {
        "gpu": f"CPU ({device.name}, no GPU: write C++ kernels)",
        "arch": "host",
        "device": "cpu",
        "cuda": "none",
        "torch": device.torch_version,
    }
