"""The evaluator port on this machine: a trusted Evaluator per episode, judging snapshots written into a scratch
workspace of the port's own (only the files that changed, so builds stay incremental for the episode).

`cudagent optimize` without --evaluator, the bench's tasks, `cudagent check` and each session of `cudagent serve`
use it; where.py makes it.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from cudagent.device.info import DeviceInfo
from cudagent.evaluator.evaluator import EvalOptions, Evaluator
from cudagent.evaluator.port import EvaluatorPort, Snapshot, write_snapshot
from cudagent.evaluator.toolchain.extension import BuildResult
from cudagent.evaluator.verdict import Verdict
from cudagent.task import Task
from cudagent.workspace import Workspace


class LocalEvaluator:
    """One episode's evaluator on this machine. One per episode: evaluations of one port run one at a time (its
    scratch workspace is one directory); many ports may evaluate at once."""

    def __init__(
        self,
        task: Task,
        device: DeviceInfo,
        options: EvalOptions | None = None,
        scratch_root: Path | None = None,
        null_candidates: list[str] | None = None,
    ):
        """`null_candidates`: the task's null-candidate check if the caller already ran it (a bench does)."""
        self.task, self.device_info = task, device
        self.options = options or EvalOptions()
        self.scratch_root, self.null_candidates = scratch_root, null_candidates
        self.evaluator: Evaluator | None = None
        self._dir: Path | None = None
        self.workspace: Workspace | None = None
        self._lock = asyncio.Lock()

    async def open(self, fail_fast: bool = False) -> None:
        """Validate the task (a broken reference fails here) and make the scratch workspace. In the calling thread:
        the task's time limit is an alarm, which only the main thread can take (see `open_blocking`)."""
        self.open_blocking()

    def open_blocking(self) -> None:
        """`open` for a caller that runs it in a worker thread of its own (a service's sessions: its event loop
        must go on), where the task's time limit does not apply."""
        if self.evaluator is None:
            evaluator = Evaluator(self.task, self.device_info, self.options, self.null_candidates)
            evaluator.validate()
            self.evaluator = evaluator
            self._dir = Path(tempfile.mkdtemp(prefix="cudagent-eval-", dir=self.scratch_root))
            self.workspace = Workspace.create(self._dir / "ws", self.task.source)

    async def build(self, snapshot: Snapshot) -> BuildResult:
        async with self._lock:
            return await asyncio.to_thread(self._build, snapshot)

    async def evaluate(self, snapshot: Snapshot, timing: bool, fresh: bool = False) -> Verdict:
        async with self._lock:
            return await asyncio.to_thread(self._evaluate, snapshot, timing, fresh)

    def describe(self) -> dict:
        return {"env": environment(self.device_info), "baselines": self._opened().baselines.cached_medians()}

    def device(self) -> dict:
        return self.device_info.to_dict()

    async def close(self) -> None:
        if self.evaluator is not None:
            await asyncio.to_thread(self.evaluator.close)
            self.evaluator = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # ----- blocking work, in a thread ----------------------------------------------------------------------------

    def _opened(self) -> Evaluator:
        if self.evaluator is None:
            raise RuntimeError("open() the evaluator port first")
        return self.evaluator

    def _build(self, snapshot: Snapshot) -> BuildResult:
        evaluator = self._opened()
        write_snapshot(snapshot, self.workspace)
        self.workspace.ensure_infrastructure(self.task.source)
        return evaluator.build(self.workspace)

    def _evaluate(self, snapshot: Snapshot, timing: bool, fresh: bool) -> Verdict:
        evaluator = self._opened()
        if not fresh:
            write_snapshot(snapshot, self.workspace)
            return evaluator.evaluate(self.workspace, timing=timing)
        with tempfile.TemporaryDirectory(prefix="fresh-", dir=self._dir) as tmp:
            ws = Workspace.create(Path(tmp) / "ws", self.task.source)
            write_snapshot(snapshot, ws)
            return evaluator.evaluate(ws, timing=timing)


class LocalEvaluators:
    """This machine's device, for any number of tasks: a LocalEvaluator each."""

    def __init__(self, device: DeviceInfo, options: EvalOptions | None = None, scratch_root: Path | None = None):
        self.device_info, self.options, self.scratch_root = device, options or EvalOptions(), scratch_root

    def port(
        self, task: Task, *, null_candidates: list[str] | None = None, scratch_root: Path | None = None
    ) -> EvaluatorPort:
        """`null_candidates`: the task's check if the caller ran it already; `scratch_root`: where this port's
        scratch workspace goes (a serve session's own directory)."""
        return LocalEvaluator(task, self.device_info, self.options, scratch_root or self.scratch_root, null_candidates)

    def where(self) -> dict | None:
        return None

    async def check(self) -> None:
        return None  # the device was found when this was made


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
