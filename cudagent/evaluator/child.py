"""The child process: the only place candidate code runs, and where baselines are timed.

    python -m cudagent.evaluator.child --fd N --role candidate|reference

The parent spawns it with a sanitized environment, its own process group and a private working directory, and
talks to it over the socket `N` (wire.py). The child never sees the reference's outputs: it runs what it is asked
to, reports what it observed, and the parent judges. Role `reference` loads only the task, from text the parent
sends, and never imports candidate code; it times the eager and compiled baselines. A process that hosts a task
whose code is not trusted (task_host.py; host_ops.py: the `host_*` requests) serves its reference calls.

One module of about 470 lines, most of it the Harness: one object holding what the process keeps across its
requests (the loaded model, the last call's inputs and outputs, the timing sets and targets, where the candidate's
own code lives), whose request handlers read that state; split across files they would pass it around rather than
share it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import sys
import traceback

import torch

import cudagent.evaluator.audit.runtime_audit as audit
import cudagent.evaluator.host_ops as host_ops
import cudagent.evaluator.jail.confine as confine
import cudagent.evaluator.jail.privileges as isolation
import cudagent.evaluator.timing.measure as measure
import cudagent.evaluator.timing.parent_clock as parent_clock
import cudagent.evaluator.toolchain.inline as inline
import cudagent.evaluator.transforms as transforms
import cudagent.evaluator.wire as wire
import cudagent.trees as trees
from cudagent.evaluator.host_ops import TaskHostOps
from cudagent.evaluator.timing.measure import Plan
from cudagent.evaluator.wire import Channel, ChannelClosed
from cudagent.trees import tensors


class Fatal(Exception):
    """The process cannot continue (a sticky CUDA error); reported, then the child exits."""


def _trace(exc: BaseException, limit: int = 4000) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-limit:]


class Harness(TaskHostOps):
    def __init__(self, channel: Channel):
        self.ch = channel
        self.device = torch.device("cpu")
        self.model = None
        self.inputs: list | None = None  # the buffers of the last call, kept for in-place mutation trials
        self.last_outputs = None  # kept alive so the allocator cannot legitimately hand their memory out again
        self.timing_sets: list[list] = []
        self.pristine: list[list] = []  # the timing sets as drawn: each call's contents are made from them
        self.pristine_specs: list = []  # a baseline worker's reading of its own sets (transforms.InputSpec)
        self.batch_last, self.batch_kept = None, {}  # the last batch's last outputs and the calls it held
        self.flush_buffer = None
        self.targets: dict = {}
        self.own_roots: tuple[
            str, ...
        ] = ()  # where the candidate's compiled modules come from (runtime_audit.OwnCalls)

    # ----- dispatch ----------------------------------------------------------------------------------------

    def serve(self) -> None:
        # Taken before any candidate code is loaded, and held only in this frame: the check is bound here, so
        # replacing Sentinel.changed afterwards changes nothing.
        changed = audit.Sentinel(_harness_modules()).changed
        foreign_code = audit.foreign_code  # bound here too: candidate code cannot swap it for a silent one
        writable = tuple({os.getcwd(), os.environ.get("TMPDIR", ""), os.environ.get("HOME", "")} - {"", "/"})
        self.ch.send(
            {
                "op": "hello",
                "pid": os.getpid(),
                "torch": torch.__version__,
                "isolation": {**isolation.status(), "confinement": confine.status()},
            }
        )
        while True:
            try:
                msg = self.ch.recv(max_bytes=1 << 42)  # the parent is trusted: no limit
            except ChannelClosed:
                return
            op = msg.get("op")
            if op == "exit":
                self.ch.send({"ok": True})
                return
            handler = getattr(self, f"op_{op}", None)
            try:
                if handler is None:
                    raise ValueError(f"unknown op {op!r}")
                reply = handler(msg)
                reply.setdefault("ok", True)
            except Fatal as exc:
                self.ch.send({"ok": False, "fatal": True, "error": str(exc), "stage": op})
                return
            except Exception as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": _trace(exc), "stage": op}
            tampered = changed()
            if tampered:
                reply["tampered"] = tampered
            foreign = foreign_code(writable)
            if foreign:
                reply["foreign_code"] = foreign
            try:
                self.ch.send(reply)
            except Exception as exc:  # noqa: BLE001  (an output whose own code raised while being read)
                self.ch.send(
                    {
                        "ok": False,
                        "stage": op,
                        "unsendable": True,
                        "error": f"the result could not be sent back: {type(exc).__name__}: {exc}",
                        **({"tampered": tampered} if tampered else {}),
                        **({"foreign_code": foreign} if foreign else {}),
                    }
                )

    def op_arena(self, msg: dict) -> dict:
        """Take the shared memory the parent sent with this message: tensors travel through it from now on."""
        if not self.ch.received_fds:
            raise ValueError("an arena was announced but no descriptor came with it")
        fd = self.ch.received_fds.pop()
        for extra in self.ch.received_fds:
            os.close(extra)
        self.ch.received_fds.clear()
        self._use_device(msg["device"])
        self.ch.attach(wire.Arena.adopt(fd), str(self.device))
        return {"size": self.ch.arena.size}

    def _use_device(self, name: str) -> None:
        self.device = torch.device(name)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device.index or 0)

    def _sync(self) -> None:
        if self.device.type != "cuda":
            return
        try:
            torch.cuda.synchronize()
        except RuntimeError as exc:  # sticky errors (illegal address, ...) poison the context: nothing more can run
            raise Fatal(f"CUDA error after the candidate's call: {str(exc).splitlines()[0]}") from exc

    # ----- the candidate ---------------------------------------------------------------------------------------

    def op_load(self, msg: dict) -> dict:
        """Import model_new.py from the hand-in (jail/cell.py: the audited text and the libraries the trusted build
        made, read-only here), build ModelNew(*init_inputs), load the reference state_dict (strict). With
        import_only (the evaluator finding out which load_inline calls a candidate makes): import and make ModelNew,
        recording the calls that were not built yet."""
        # No thread of the harness runs beside candidate code: the profiler's warm-up imports modules (sympy among
        # them, on a CUDA build), and an import half done in that thread while the candidate's first torch ops import
        # the same package left it half initialized in the candidate's thread (seen on the H100 once the task's check
        # no longer delayed the first load: "module 'sympy' has no attribute 'printing'" in every trial).
        audit.await_profiler_warmup()
        self._use_device(msg["device"])
        handin = msg["handin"]
        self.own_roots = (handin,)
        sys.path.insert(0, handin)  # cuda_extension, a workspace's module
        served = inline.install(os.path.join(handin, "prebuilt"), record=bool(msg.get("import_only")))
        spec = importlib.util.spec_from_file_location("model_new", os.path.join(handin, "model_new.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules["model_new"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # SystemExit from candidate code too
            error = {"ok": False, "stage": "import", "error": f"{type(exc).__name__}: {exc}", "trace": _trace(exc)}
            return {**error, "load_inline": served}
        cls = getattr(module, "ModelNew", None)
        if msg.get("import_only"):
            if isinstance(cls, type) and msg.get("init_inputs") is not None:
                try:  # load_inline calls made in ModelNew.__init__ are recorded too
                    with torch.random.fork_rng(devices=[]):
                        cls(*msg["init_inputs"])
                except BaseException:  # noqa: BLE001  (the verification reports a failing __init__ in full)
                    pass
            return {"libraries": audit.own_libraries([handin]), "load_inline": served}
        if not isinstance(cls, type):
            return {"ok": False, "stage": "init", "error": "model_new.py defines no class ModelNew"}
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(msg.get("seed", 0)))
                model = cls(*msg["init_inputs"])
            model = model.to(self.device).eval()
        except BaseException as exc:
            return {"ok": False, "stage": "init", "error": f"{type(exc).__name__}: {exc}", "trace": _trace(exc)}
        self.model = model
        reply = self.op_load_state(msg)
        if not reply.get("ok", True):
            return reply
        return {
            "libraries": audit.own_libraries([handin]),
            "reference_imported": "model" in sys.modules,
            "load_inline": served,
        }

    def op_load_state(self, msg: dict) -> dict:
        try:
            self.model.load_state_dict(msg["state_dict"], strict=True)
        except BaseException as exc:
            return {"ok": False, "stage": "load_state_dict", "error": f"{type(exc).__name__}: {exc}"}
        self._sync()
        return {}

    def op_call(self, msg: dict) -> dict:
        """One audited forward call; the parent compares the outputs it gets back."""
        if msg.get("reuse"):
            with torch.no_grad():
                for buf, new in zip(self.inputs, msg["inputs"]):
                    if isinstance(buf, torch.Tensor):
                        buf.copy_(new)  # same buffers, new contents (a Python value stays what it was)
        else:
            self.inputs = [trees.to_device(x, self.device) for x in msg["inputs"]]
        inputs = self.inputs
        before = [trees.clone(x) for x in inputs]
        audit.poison_free_memory(list(msg.get("poison_nbytes", [])), self.device)
        self._sync()
        record = audit.record_call(
            lambda: self.model(*inputs), self.device, bool(msg.get("observe_kernels")), self.own_roots
        )
        self._sync()
        observed = {
            **record.report(),
            "python_threads": 1 + audit.other_threads(),
            "reference_imported": "model" in sys.modules,
        }
        if record.error is not None:
            if isinstance(record.error, Fatal):
                raise record.error
            exc = record.error
            return {
                "ok": False,
                "stage": "forward",
                "error": f"{type(exc).__name__}: {exc}",
                "trace": _trace(exc),
                **observed,
            }
        out = record.result
        reply = {
            "outputs": out,
            **observed,
            "launch_error": audit.cuda_last_error() if self.device.type == "cuda" else None,
            "aliasing": self._aliasing(out),
            "mutated_inputs": [i for i, (a, b) in enumerate(zip(before, inputs)) if not _bitwise_equal(a, b)],
        }
        self.last_outputs = out
        return reply

    def _aliasing(self, out) -> list[str]:
        found = []
        outs = [t for t in tensors(out) if type(t) is torch.Tensor]
        inputs = [audit.storage_span(x) for x in tensors(self.inputs)]
        params = [audit.storage_span(p) for p in list(self.model.parameters()) + list(self.model.buffers())]
        previous = [audit.storage_span(t) for t in tensors(self.last_outputs) if type(t) is torch.Tensor]
        for i, t in enumerate(outs):
            span = audit.storage_span(t)
            if any(audit.overlaps(span, s) for s in inputs):
                found.append(f"output {i} shares memory with an input")
            if any(audit.overlaps(span, s) for s in params):
                found.append(f"output {i} shares memory with a parameter or buffer of ModelNew")
            if any(audit.overlaps(span, s) for s in previous):
                found.append(f"output {i} shares memory with the previous call's output")
        return found

    # ----- timing (both roles) ---------------------------------------------------------------------------------

    def _target(self, name: str | None):
        """The callable to time: the candidate, or (reference role) the eager or compiled reference."""
        if name in (None, "candidate"):
            return self.model
        return self.targets[name]

    def op_time(self, msg: dict) -> dict:
        """Time a target over the input sets (rotated), each call on contents never seen before; keep the outputs
        of a few samples, chosen after the fact, for the parent to check."""
        audit.await_profiler_warmup()
        if msg.get("inputs") is not None:
            self._install_sets(msg["inputs"])
        sets, fn = self.timing_sets, self._target(msg.get("target"))
        change = None
        if msg.get("transform") is not None:
            specs = [transforms.InputSpec.from_list(items) for items in msg["transform"]["specs"]]
            stream = transforms.ParamStream(int(msg["transform"]["seed"]))

            def change(call: int, k: int) -> None:
                draws = stream.next(len(sets[k]))  # calls come in order: the parent replays the same stream
                with torch.no_grad():
                    specs[k].apply(self.pristine[k], draws, out=sets[k])

        result = measure.measure(lambda k: fn(*sets[k]), len(sets), self.device, Plan.from_dict(msg["plan"]), change)
        self._sync()
        kept = {str(c): {"set": k, "outputs": o} for c, (k, o) in result.pop("kept").items()}
        return {**result, "kept": kept}

    def op_batch(self, msg: dict) -> dict:
        """Call a target `n` times over the timing sets (installed first if the message brings them), each call on
        contents never seen before, on a GPU after an L2 flush and followed by a synchronize (parent_clock.run_calls);
        send at once an early frame with the float64 sums of the last call's outputs (the parent's clock runs from the
        request to that frame), then the reply. The last outputs, and `keep` more chosen over the calls after each
        returned, are held for `batch_output`."""
        if msg.get("inputs") is not None:
            self._install_sets(msg["inputs"])
        fn = self._target(msg.get("target"))
        if msg.get("specs") is not None:
            specs = [transforms.InputSpec.from_list(items) for items in msg["specs"]]
        else:  # a baseline worker: its own sets, its own reading of them
            specs = self.pristine_specs
        flush = self._flush() if self.device.type == "cuda" else None
        self.batch_last, self.batch_kept = None, {}
        out, k, kept = parent_clock.run_calls(
            fn,
            self.timing_sets,
            self.pristine,
            specs,
            int(msg["seed"]),
            int(msg["n"]),
            flush,
            self._sync,
            int(msg.get("keep", 0)),
        )
        self.batch_last, self.batch_kept = out, kept
        # the parent's clock stops at this frame; the reply after it carries the checks every reply gets
        self.ch.send({"early": True, "n": int(msg["n"]), "set": k, "checksum": parent_clock.checksums(out)})
        return {}

    def op_batch_output(self, msg: dict) -> dict:
        """The last batch's last outputs and the calls it held (the parent checks them, its clock stopped)."""
        kept = {str(c): {"set": k, "outputs": o} for c, (k, o) in self.batch_kept.items()}
        return {"outputs": self.batch_last, "kept": kept}

    def _install_sets(self, inputs: list) -> None:
        self.timing_sets = [[trees.to_device(x, self.device) for x in s] for s in inputs]
        self.pristine = [[trees.clone(x) for x in s] for s in self.timing_sets]

    def _flush(self):
        if self.flush_buffer is None:
            self.flush_buffer = measure.flush_buffer(self.device, 0)
        return self.flush_buffer

    def op_warm(self, msg: dict) -> dict:
        """One call of a target on the first input set, untimed (a compiled reference compiles here)."""
        fn = self._target(msg.get("target"))
        with torch.no_grad():
            fn(*self.timing_sets[0])
        self._sync()
        audit.await_profiler_warmup()  # finished here, not inside a timing that has the device alone
        return {}

    def op_kernels(self, msg: dict) -> dict:
        """Every kernel a number of calls launched (all streams), aggregated by name."""
        sets, fn = self.timing_sets, self._target(msg.get("target"))
        n = int(msg.get("iterations", 20))
        with torch.no_grad():
            kernels = audit.profile_kernels(lambda i: fn(*sets[i % len(sets)]), n)
        self._sync()
        return {"iterations": n, "kernels": kernels}

    def op_nvtx_call(self, msg: dict) -> dict:
        """One warm-up call, then one call inside the NVTX range `cudagent` (what ncu profiles)."""
        inputs = [trees.to_device(x, self.device) for x in msg["inputs"]]
        with torch.no_grad():
            self.model(*inputs)
            torch.cuda.synchronize()
            with torch.cuda.nvtx.range("cudagent"):
                self.model(*inputs)
            torch.cuda.synchronize()
        return {}

    # ----- the reference (baseline worker) ---------------------------------------------------------------------

    def op_load_reference(self, msg: dict) -> dict:
        """Load the task from the text the parent sent; keep the eager model and, if asked, its compiled form."""
        from cudagent.task import Task

        self._use_device(msg["device"])
        task = Task(name=msg["name"], source=msg["source"])
        model = task.build_model(seed=int(msg["seed"]), device=msg["device"])
        # "null": a call that does nothing, whose batches cost what every target's do besides the call itself
        self.targets = {"eager": model, "null": _null_call}
        if msg.get("compile_mode"):
            mode = None if msg["compile_mode"] == "default" else msg["compile_mode"]
            self.targets["compile"] = torch.compile(model, mode=mode)
        self.model, self.task = model, task
        return {}

    def op_reference_sets(self, msg: dict) -> dict:
        """Draw the timing's input sets from the parent's seeds: as many as measure.draw_input_sets takes."""
        seeds = msg["seeds"]
        self.timing_sets = measure.draw_input_sets(
            lambda i: self.task.make_inputs(int(seeds[i]), msg["device"]), self.device
        )
        self.pristine = [[trees.clone(x) for x in s] for s in self.timing_sets]
        self.pristine_specs = [transforms.InputSpec.of(s) for s in self.pristine]
        return {"sets": len(self.timing_sets)}

    def op_peaks(self, msg: dict) -> dict:
        from cudagent.evaluator.timing.peak_rates import measure_peaks

        self._use_device(msg["device"])
        return {"peaks": measure_peaks(self.device)}


def _null_call(*inputs):
    return next(iter(tensors(inputs)), None)


def _harness_modules() -> list:
    """The modules whose code decides what this process reports."""
    return [sys.modules[__name__], audit, measure, transforms, trees, wire, isolation, confine, host_ops]


def _bitwise_equal(a, b) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        if isinstance(a, (list, tuple)) and type(a) is type(b) and len(a) == len(b):
            return all(_bitwise_equal(x, y) for x, y in zip(a, b))
        return type(a) is type(b) and a == b  # a Python value passed as it is
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="cudagent.evaluator.child")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--warm-profiler", action="store_true", help="set the profiler up now, in the background")
    parser.add_argument(
        "--keep-privileges", action="store_true", help="keep capabilities (a profiler such as ncu needs them)"
    )
    args = parser.parse_args(argv)
    if not args.keep_privileges:
        isolation.drop_privileges()  # before any candidate code: the evaluator's memory stays closed to it
    if args.device == "cuda":  # create the context now, while the parent is still busy (building, say)
        try:
            torch.cuda.init()
            torch.empty(1, device="cuda")
        except Exception as exc:  # noqa: BLE001
            if confine.status()["level"] == "off":
                raise
            print(f"cudagent: CUDA could not start in the confined process: {exc}", flush=True)
            os._exit(confine.EXIT_CUDA_CONFINED)
    if args.warm_profiler:
        audit.start_profiler_warmup(cuda=args.device == "cuda")
    sock = socket.socket(fileno=args.fd)
    channel = Channel(sock, accept_fds=True)
    status = 0
    try:
        Harness(channel).serve()
    except BaseException:  # a fault of the harness itself (or of candidate code it could not contain): say so
        traceback.print_exc()
        status = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    # Skip interpreter teardown: candidate objects' destructors and atexit hooks get no chance to run.
    os._exit(status)


if __name__ == "__main__":
    main()
