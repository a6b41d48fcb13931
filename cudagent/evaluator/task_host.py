"""A task whose code is not trusted (a `cudagent serve` client's, a generated one), run only in the jail.

    task = HostedTask(load_task(path), device_kind, cell)   # what the evaluator calls on a Task, served from a jail
    model = task.build_model(seed, device); task.run(model, task.make_inputs(seed, device)); task.close()

A plain Task executes its file in the evaluator's own process: right for the user's own model and tasks, wrong for
text someone else sent, whose module-level code would run as the service, beside every other client's sessions. A
HostedTask never executes its source here: a process in the evaluator's jail (the candidates' cell: its own
namespaces, Landlock and seccomp, no capability, a scratch of its own) loads it from the text, and every reference
call (the task's check, weights, inputs, forward calls, sizes, cost) is a request to it over the evaluator's wire.
Its models stay there, as handles (`HostedModel`); tensors come back as data, never as code (wire.py decodes no
pickle). What that process could do wrong is limited to the answers it gives, which only its own session reads.

Such processes cost memory (torch, a CUDA context): at most `HOSTS.limit` live in one evaluator process (a service's
worker holds many sessions), the least recently used idle one stopped to make room for another; a stopped task
starts again on its next request (its state is only the loaded module: every model is built from a seed).

The child's side: host_ops.py (the `op_host_*` handlers of the child's Harness).
"""

from __future__ import annotations

import contextlib
import threading

from cudagent.errors import TaskError
from cudagent.procs import physical_memory_bytes
from cudagent.task import DEFAULT_TASK_TIMEOUT_S, Task, TaskNeedsGPU, TaskSizes
from cudagent.trees import to_device

HOST_TIMEOUT_S = 600.0  # one request of the host (a forward call of a large reference, a draw of its inputs)
DEFAULT_HOSTS = 4  # task processes alive at once in one process (`cudagent serve --task-processes`)


class Hosts:
    """The task processes alive in this process: at most `limit`; see the module's note."""

    def __init__(self, limit: int = DEFAULT_HOSTS):
        self.limit = limit
        self._cond = threading.Condition()
        self._live: dict[HostedTask, float] = {}  # last used, by clock
        self._busy: dict[HostedTask, int] = {}  # holders of each (an evaluation, a request within it)
        self.peak = 0  # the most alive at once (what a test or /info reads)

    def acquire(self, task: HostedTask) -> None:
        """Room for `task`'s process (alive already, or started by the caller next), held until release()."""
        import time

        with self._cond:
            while task not in self._live and len(self._live) >= self.limit:
                idle = [t for t in self._live if t not in self._busy]
                if idle:
                    victim = min(idle, key=self._live.__getitem__)
                    del self._live[victim]
                    victim._stop()
                else:
                    self._cond.wait()
            self._live[task] = time.monotonic()
            self._busy[task] = self._busy.get(task, 0) + 1
            self.peak = max(self.peak, len(self._live))

    def release(self, task: HostedTask, alive: bool = True) -> None:
        with self._cond:
            left = self._busy.get(task, 0) - 1
            if left > 0:
                self._busy[task] = left
            else:
                self._busy.pop(task, None)
            if not alive and left <= 0:
                self._live.pop(task, None)
            self._cond.notify_all()

    def forget(self, task: HostedTask) -> None:
        with self._cond:
            self._live.pop(task, None)
            self._busy.pop(task, None)
            self._cond.notify_all()


HOSTS = Hosts()


class HostedModel:
    """The reference model of a HostedTask: a handle to a model in the task's process."""

    def __init__(self, host: HostedTask, handle: int):
        self.host, self.handle = host, handle

    def state_dict(self) -> dict:
        return self.host.request({"op": "host_state", "id": self.handle}, "reading the reference's weights")["state"]

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        self.host.request({"op": "host_load_state", "id": self.handle, "state": state}, "loading weights")

    def __del__(self):
        self.host.release(self.handle)


class HostedTask(Task):
    """A Task served from a jailed process; see the module's note. `cell()` gives the evaluator's jail."""

    __eq__ = object.__eq__  # each one is its own process: compared and kept (in HOSTS) by identity
    __hash__ = object.__hash__

    def __init__(self, task: Task, device: str, cell, memory_limit_bytes: int | None = None):
        super().__init__(task.name, task.source, task.path)
        self._device, self._cell, self._memory = device, cell, memory_limit_bytes
        self._child = None
        self._lock = threading.RLock()
        self._released: list[int] = []
        self._init: list | None = None

    @property
    def module(self):
        raise TaskError(f"{self.filename} is hosted in the jail; its module is never executed in this process")

    # ----- the process -----------------------------------------------------------------------------------------

    def request(self, msg: dict, what: str, timeout_s: float = HOST_TIMEOUT_S) -> dict:
        from cudagent.evaluator.jail.process import ChildFailure

        with self._lock:
            HOSTS.acquire(self)
            try:
                child = self._started()
                if self._released:
                    msg = {**msg, "release": self._released}
                    self._released = []
                reply = child.request(msg, timeout_s=timeout_s, max_bytes=physical_memory_bytes() // 2, what=what)
            except ChildFailure as exc:
                self._stop()
                raise TaskError(f"{self.filename}: the task's process failed while {what}: {exc.message}") from None
            finally:
                HOSTS.release(self, alive=self._child is not None)
        if not reply.get("ok", False):
            if reply.get("needs_gpu"):
                raise TaskNeedsGPU(reply["task_error"])
            raise TaskError(reply.get("task_error") or f"{self.filename}: {what} failed: {reply.get('error')}")
        return reply

    def _started(self):
        if self._child is None:
            from cudagent.evaluator.jail.process import ChildProcess

            child = ChildProcess(device=self._device, cell=self._cell(), memory_limit_bytes=self._memory)
            child.start()
            reply = child.request(
                {"op": "host_load", "name": self.name, "source": self.source, "filename": self.filename},
                timeout_s=DEFAULT_TASK_TIMEOUT_S,
                what="loading the task",
            )
            if not reply.get("ok", False):
                child.close()
                raise TaskError(reply.get("task_error") or f"{self.filename} could not be loaded: {reply.get('error')}")
            self._child = child
        return self._child

    @contextlib.contextmanager
    def held(self):
        """Keep the task's process for a stretch of requests whose models must outlive each request (an evaluation):
        it is not stopped to make room meanwhile."""
        HOSTS.acquire(self)
        try:
            yield
        finally:
            HOSTS.release(self, alive=self._child is not None)

    def release(self, handle: int) -> None:
        self._released.append(handle)  # told with the next request: a finalizer sends nothing itself

    def _stop(self) -> None:
        """End the process (its models with it: handles still held elsewhere name nothing any more)."""
        if self._child is not None:
            self._child.close()
            self._child = None
            self._released = []

    def close(self) -> None:
        with self._lock:
            self._stop()
            HOSTS.forget(self)

    # ----- what the evaluator calls on a Task ------------------------------------------------------------------

    def validate(self, device: str, timeout_s: float | None = None):
        """The task's check (task.validate_task), run in its process; one reference output."""
        limit = timeout_s or DEFAULT_TASK_TIMEOUT_S
        reply = self.request({"op": "host_validate", "device": device, "timeout": limit}, "checking the task", limit)
        return to_device(reply["output"], device)

    def init_inputs(self) -> list:
        if self._init is None:
            self._init = list(self.request({"op": "host_init_inputs"}, "calling get_init_inputs")["init"])
        return list(self._init)

    def build_model(self, seed: int, device: str) -> HostedModel:
        reply = self.request({"op": "host_build", "seed": seed, "device": device}, "building the reference")
        return HostedModel(self, reply["id"])

    def make_inputs(self, seed: int, device: str) -> list:
        reply = self.request({"op": "host_inputs", "seed": seed, "device": device}, "drawing inputs")
        return [to_device(x, device) for x in reply["inputs"]]

    def run(self, model: HostedModel, inputs: list):
        reply = self.request({"op": "host_run", "id": model.handle, "inputs": inputs}, "running the reference")
        return to_device(reply["output"], self._device)

    def sizes_on_meta(self, output: bool = True) -> TaskSizes | None:
        sizes = self.request({"op": "host_sizes", "output": output}, "sizing the task")["sizes"]
        return TaskSizes(**sizes) if sizes is not None else None

    def cost(self, device: str) -> dict:
        """The reference's bytes and FLOPs for one call (timing/roofline.task_cost, computed in its process)."""
        return self.request({"op": "host_cost", "device": device}, "counting the reference's cost")["cost"]
