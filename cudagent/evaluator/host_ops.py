"""The child's side of a hosted task (task_host.py): the `host_*` requests a process of the jail serves, as handlers of
the child's Harness (child.py). A task's error comes back as `task_error` (its message, for the client), never as a
failure of the process.
"""

from __future__ import annotations

from cudagent.errors import TaskError
from cudagent.task import Task, TaskNeedsGPU
from cudagent.trees import to_device


class TaskHostOps:
    """Handlers the Harness dispatches `host_*` requests to; see the module's note."""

    hosted: Task | None = None
    hosted_models: dict

    def op_host_load(self, msg: dict) -> dict:
        from pathlib import Path

        self.hosted = Task(name=msg["name"], source=msg["source"], path=Path(msg["filename"]))
        self.hosted_models = {}
        return self._hosting(msg, lambda: {"loaded": self.hosted.module.__name__})

    def op_host_validate(self, msg: dict) -> dict:
        from cudagent.task import validate_task

        self._use_device(msg["device"])
        return self._hosting(msg, lambda: {"output": validate_task(self.hosted, msg["device"], float(msg["timeout"]))})

    def op_host_init_inputs(self, msg: dict) -> dict:
        return self._hosting(msg, lambda: {"init": self.hosted.init_inputs()})

    def op_host_build(self, msg: dict) -> dict:
        def build():
            handle = max(self.hosted_models, default=0) + 1
            self.hosted_models[handle] = self.hosted.build_model(int(msg["seed"]), msg["device"])
            return {"id": handle}

        self._use_device(msg["device"])
        return self._hosting(msg, build)

    def op_host_state(self, msg: dict) -> dict:
        model = self.hosted_models[int(msg["id"])]
        return self._hosting(msg, lambda: {"state": {k: v.detach().cpu() for k, v in model.state_dict().items()}})

    def op_host_load_state(self, msg: dict) -> dict:
        model = self.hosted_models[int(msg["id"])]
        return self._hosting(msg, lambda: {"loaded": str(model.load_state_dict(msg["state"], strict=True))})

    def op_host_inputs(self, msg: dict) -> dict:
        return self._hosting(msg, lambda: {"inputs": self.hosted.make_inputs(int(msg["seed"]), msg["device"])})

    def op_host_run(self, msg: dict) -> dict:
        model = self.hosted_models[int(msg["id"])]
        inputs = [to_device(x, str(self.device)) for x in msg["inputs"]]
        return self._hosting(msg, lambda: {"output": self.hosted.run(model, inputs)})

    def op_host_sizes(self, msg: dict) -> dict:
        from dataclasses import asdict

        def sizes():
            found = self.hosted.sizes_on_meta(output=bool(msg.get("output", True)))
            return {"sizes": asdict(found) if found is not None else None}

        return self._hosting(msg, sizes)

    def op_host_cost(self, msg: dict) -> dict:
        import secrets

        from cudagent.evaluator.timing.roofline import task_cost

        def cost():
            model = self.hosted.build_model(secrets.randbits(62), msg["device"])
            inputs = self.hosted.make_inputs(secrets.randbits(62), msg["device"])
            return {"cost": task_cost(model, inputs, self.hosted.run(model, inputs)).to_dict()}

        return self._hosting(msg, cost)

    def _hosting(self, msg: dict, work) -> dict:
        for handle in msg.get("release") or []:  # models the parent no longer holds
            self.hosted_models.pop(int(handle), None)
        try:
            return work()
        except TaskNeedsGPU as exc:
            return {"ok": False, "task_error": exc.message, "needs_gpu": True}
        except TaskError as exc:
            return {"ok": False, "task_error": exc.message}
