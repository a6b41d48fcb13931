"""The evaluator as an episode sees it: build and evaluate snapshots of the files an agent owns.

A snapshot is `{relative path: bytes}` of model_new.py and the sources under kernels/; the reference and the fixed
infrastructure never travel, since the evaluator has its own pristine copies. A port never judges an agent's live
directory. Two implementations: on this machine (local.py: each snapshot written into a scratch workspace of its
own, only the files that changed, so builds stay incremental for the episode) and on `cudagent serve` services
(remote.py: verdicts and build results round-trip through JSON). where.py chooses between them; nothing else
constructs an evaluator.

    port = evaluators(urls, device="auto").port(task)    # where.py
    await port.open()                                     # validates the task (here or on the service)
    port.describe(), port.device()                        # what the prompts say; the device's facts
    await port.build(snapshot); await port.evaluate(snapshot, timing=True)
    await port.close()
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from cudagent.boundary.paths import MAX_DEPTH, MAX_NAME_BYTES, MAX_PATH_CHARS
from cudagent.errors import EnvironmentProblem
from cudagent.workspace import KERNELS, MODEL_NEW, SOURCE_SUFFIXES, Workspace, source_problem

if TYPE_CHECKING:
    from cudagent.evaluator.toolchain.extension import BuildResult
    from cudagent.evaluator.verdict import Verdict
    from cudagent.task import Task

Snapshot = dict[str, bytes]
MAX_SNAPSHOT_BYTES = 16 << 20


class SnapshotError(ValueError):
    """A snapshot names a file an agent does not own, or is too large."""


class EvaluatorUnavailable(EnvironmentProblem):
    """The evaluator could not be reached or could not answer (a remote service down for longer than its clients
    wait, a worker that faulted): the call judged nothing. A tool call that meets it fails; the episode goes on."""


def snapshot_of(ws: Workspace) -> Snapshot:
    """The files of `ws` an agent owns: model_new.py and the sources under kernels/, read without following a link
    (a model_new.py or a kernels/ that is a link to a file elsewhere contributes nothing)."""
    files: Snapshot = {}
    for path in [ws.model_new_py, *ws.kernel_sources()]:
        try:
            files[path.relative_to(ws.root).as_posix()] = ws.read_owned(path)
        except (OSError, ValueError):  # missing, a link, not a regular file
            continue
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
        if not ok or "\\" in rel or "\0" in rel:
            raise SnapshotError(f"{rel!r} is not a file an agent owns (model_new.py, or a source under kernels/)")
        problem = source_problem(rel, data) if rel != MODEL_NEW else None
        if problem is not None:
            raise SnapshotError(problem)
        if len(rel) > MAX_PATH_CHARS or len(parts) > MAX_DEPTH or any(len(p.encode()) > MAX_NAME_BYTES for p in parts):
            raise SnapshotError(
                f"{rel[:80]!r}... is too long a path: at most {MAX_PATH_CHARS} characters, {MAX_DEPTH} folders deep, "
                f"{MAX_NAME_BYTES} bytes a name"
            )
        total += len(data)
    if total > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(f"the snapshot holds {total} bytes; at most {MAX_SNAPSHOT_BYTES} are accepted")


def agent_files(files: dict[str, bytes]) -> Snapshot:
    """The files of `files` (a commit's tree, say) that a snapshot may hold; the others left out."""
    owned = {}
    for rel, data in files.items():
        try:
            check_snapshot({rel: data})
        except SnapshotError:
            continue
        owned[rel] = data
    return owned


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


def snapshot_digest(snapshot: Snapshot) -> str:
    """sha256 over the sorted paths and contents: what a verdict is about."""
    h = hashlib.sha256()
    for path in sorted(snapshot):
        data = snapshot[path]
        h.update(f"{path}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


@runtime_checkable
class EvaluatorPort(Protocol):
    """One episode's evaluator, for one task. Evaluations of one port run one at a time; many ports may run at
    once."""

    async def open(self, fail_fast: bool = False) -> None:
        """Validate the task and get ready (a remote port opens its session). `fail_fast`: nothing answering is an
        error at once, not retried (a new run, before anything exists)."""

    async def build(self, snapshot: Snapshot) -> BuildResult:
        """Build the snapshot's extension (incrementally, within one episode)."""

    async def evaluate(self, snapshot: Snapshot, timing: bool, fresh: bool = False) -> Verdict:
        """Verify (and with `timing`, time) the snapshot; `fresh`: in a new directory with a clean build."""

    def describe(self) -> dict:
        """What the prompts say about where kernels run: {"env": {gpu, arch, device, cuda, torch},
        "baselines": cached baseline medians or None}."""

    def device(self) -> dict:
        """The facts of the device kernels run on (DeviceInfo as a dict): a run's header, the skills to load."""

    async def close(self) -> None:
        """Give back what the port holds (processes, scratch directories, a session)."""


class Evaluators(Protocol):
    """Where candidates are judged (this machine, or `cudagent serve` services): a port per task."""

    def port(self, task: Task) -> EvaluatorPort: ...

    def where(self) -> dict | None:
        """What a run's record says of it, so that a resume finds it again (None: this machine)."""

    async def check(self) -> None:
        """Fail at once, in one sentence, when it cannot be used (nothing answering, a wrong token)."""
