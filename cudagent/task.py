"""A task: a KernelBench-style file defining `Model`, `get_inputs()` and `get_init_inputs()` (one module, a little
over 400 lines: loading, validating and fingerprinting a task read the same definitions).

The task is the trusted reference. It is loaded only in the trusted process, from text whose hash is recorded,
and executed in a module of its own (never through sys.path, so no candidate can shadow it). Models run in
eval() mode under torch.no_grad(), as in the CUDA Agent protocol.
"""

from __future__ import annotations

import copy
import hashlib
import os
import signal
import sys
import threading
import traceback
import types
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudagent.errors import ExitCode, TaskError
from cudagent.trees import to_device

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
MAX_TASK_BYTES = 1_000_000
DEFAULT_TASK_TIMEOUT_S = 300.0
# Two runs of the reference with the same seed must agree this closely; looser than bitwise so that GPU
# reductions with atomics (which reorder additions) are not mistaken for stochastic models.
DETERMINISM_RTOL = 1e-5
DETERMINISM_ATOL = 1e-6


class TaskNeedsGPU(TaskError):
    """The task is fine but creates CUDA tensors, and there is no GPU here."""

    exit_code = ExitCode.ENVIRONMENT


@dataclass
class Task:
    name: str
    source: str
    path: Path | None = None
    sha256: str = ""
    _module: types.ModuleType | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.sha256 = hashlib.sha256(self.source.encode()).hexdigest()

    @property
    def filename(self) -> str:
        return str(self.path) if self.path else f"{self.name}.py"

    # ----- the reference, in this (trusted) process -----------------------------------------------------------

    @property
    def module(self) -> types.ModuleType:
        if self._module is None:
            self._module = _exec_task(self)
        return self._module

    def init_inputs(self) -> list:
        """Constructor arguments; deterministic in KernelBench, so drawn under a fixed seed."""

        with seeded(0, "cpu"):
            init = self._call("get_init_inputs")
        return list(init) if isinstance(init, (list, tuple)) else [init]

    def build_model(self, seed: int, device: str):
        """The reference Model with weights drawn under `seed`, on `device`, in eval mode."""

        init = self.init_inputs()
        with seeded(seed, device):
            try:
                model = self.module.Model(*init)
            except Exception as exc:
                raise TaskError(f"{self.filename}: Model(*get_init_inputs()) raised {_describe(exc, self)}") from exc
        try:
            return model.to(device).eval()
        except Exception as exc:
            raise TaskError(f"{self.filename}: moving Model to {device} raised {_describe(exc, self)}") from exc

    def make_inputs(self, seed: int, device: str) -> list:
        """get_inputs() drawn under `seed`, on `device`: on a GPU, tensors the task creates without naming a device
        are drawn there directly (KernelBench's inputs can take gigabytes, seconds of host work and a copy each)."""
        import torch

        on_gpu = torch.device(device) if str(device).startswith("cuda") else nullcontext()
        with seeded(seed, device), on_gpu:
            inputs = self._call("get_inputs")
        if isinstance(inputs, torch.Tensor):
            inputs = [inputs]
        if not isinstance(inputs, (list, tuple)):
            raise TaskError(f"{self.filename}: get_inputs() must return a list of inputs, not {type(inputs).__name__}")
        for i, x in enumerate(inputs):
            why = _unfit_input(x)
            if why:
                raise TaskError(f"{self.filename}: get_inputs() item {i} {why}")
        return [to_device(x, device) for x in inputs]

    def sizes_on_meta(self, output: bool = True) -> TaskSizes | None:
        """What the task's weights, inputs and output take, in bytes, found on torch's meta device (shapes only: no
        memory, no compute); None where the task cannot be built there (it names a device, or an op has no meta
        form). An output that cannot be found is counted as large as the inputs. `output=False` leaves the output at
        0 and runs no forward: a process's first forward on the meta device imports torch._dynamo (a second of CPU,
        for the meta forms of ops), which a caller that needs only the inputs' bytes need not pay."""
        import torch

        try:
            with seeded(0, "cpu"), torch.device("meta"):
                inputs = self._call("get_inputs")
                inputs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
                model = self.module.Model(*self.init_inputs())
        except Exception:
            return None
        sizes = TaskSizes(
            params=_tensor_bytes(list(model.parameters()) + list(model.buffers())), inputs=_tensor_bytes(inputs)
        )
        if any(isinstance(x, torch.Tensor) and x.device.type != "meta" for x in inputs):
            return None
        if not output:
            return sizes
        try:
            with torch.no_grad():
                sizes.output = _tensor_bytes(model(*inputs))
        except Exception:
            sizes.output = sizes.inputs
        return sizes

    def run(self, model, inputs: list):
        import torch

        try:
            with torch.no_grad():
                return model(*inputs)
        except TaskError:
            raise
        except Exception as exc:
            raise TaskError(f"{self.filename}: the reference Model raised {_describe(exc, self)} in forward") from exc

    def validate(self, device: str, timeout_s: float | None = None) -> Any:
        """validate_task on this task (a hosted task runs it where its code lives: evaluator/task_host.py)."""
        return validate_task(self, device, timeout_s)

    def close(self) -> None:
        """Give back what serving the task holds (nothing, for a task executed in this process)."""

    def held(self):
        """A stretch of calls whose models outlive each call (an evaluation); nothing to hold in this process."""
        return nullcontext()

    def _call(self, name: str):
        try:
            return getattr(self.module, name)()
        except TaskError:
            raise
        except Exception as exc:
            raise TaskError(f"{self.filename}: {name}() raised {_describe(exc, self)}") from exc


@dataclass
class TaskSizes:
    """Bytes of a task's weights (and buffers), of one draw of its inputs, and of its output."""

    params: int
    inputs: int
    output: int = 0


# What forward may take besides tensors, as KernelBench passes it: values that reach the candidate as they are.
PLAIN_INPUTS = (type(None), bool, int, float, str)


def _unfit_input(x) -> str | None:
    """Why an input cannot be passed to both models (None when it can): a plain tensor, a Python number, None, a
    string, a dtype, or a list or tuple of these. Tensor subclasses (which can run code on every access) are not."""
    import torch

    if type(x) is torch.Tensor or isinstance(x, PLAIN_INPUTS) or isinstance(x, torch.dtype):
        return None
    if type(x) in (list, tuple):
        return next((why for why in map(_unfit_input, x) if why), None)
    return (
        f"is a {type(x).__module__}.{type(x).__qualname__}; inputs must be tensors, Python numbers, None, strings, "
        "dtypes, or lists and tuples of these"
    )


def _tensor_bytes(obj) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(_tensor_bytes(x) for x in obj.values())
    return 0


def load_task(path: Path) -> Task:
    """Read a task file; everything about its contents is checked by `validate_task`."""
    path = Path(path).expanduser()
    if not path.exists():
        raise TaskError(f"the task file {path} does not exist")
    if not path.is_file():
        raise TaskError(
            f"the task {path} is not a file; give a Python file defining Model, get_inputs, get_init_inputs"
        )
    size = path.stat().st_size
    if size > MAX_TASK_BYTES:
        raise TaskError(
            f"the task file {path} is {size} bytes; a task file over {MAX_TASK_BYTES} bytes is not accepted"
        )
    try:
        source = path.read_text()
    except UnicodeDecodeError as exc:
        raise TaskError(f"the task file {path} is not UTF-8 text") from exc
    return Task(name=path.stem, source=source, path=path.resolve())


def validate_task(task: Task, device: str, timeout_s: float | None = None) -> Any:
    """Check the task can serve as a reference on `device`; return one reference output for information.

    It must define the three names, give tensor inputs, run, and be deterministic: two runs with the same seeds
    for weights and inputs must agree even when the global RNG differs before forward (which exposes dropout in
    training mode and random ops inside forward). It must do all that within `timeout_s` (default
    $CUDAGENT_TASK_TIMEOUT_S or 300 s): a task that waits or loops forever is an error, not a hang. A task that
    needs CUDA on a machine without it is TaskNeedsGPU (an environment problem, not a bad file).
    """
    limit = timeout_s or float(os.environ.get("CUDAGENT_TASK_TIMEOUT_S") or DEFAULT_TASK_TIMEOUT_S)
    try:
        with _deadline(limit):
            return _validate(task, device)
    except _TaskTimeout:
        raise TaskError(
            f"{task.filename} did not load and run within {limit:.0f} s; a task must not wait for input or loop forever"
        ) from None
    except TaskError as exc:
        if device == "cpu" and _needs_cuda(exc.__cause__):
            raise TaskNeedsGPU(
                f"{task.filename} needs a CUDA GPU ({_describe(exc.__cause__, task)}) and this machine has none; "
                "run it where torch sees a GPU"
            ) from exc
        raise


class _TaskTimeout(BaseException):
    """Raised by the deadline's alarm; a BaseException so that the task's own `except Exception` cannot eat it."""


@contextmanager
def _deadline(seconds: float):
    """An alarm that interrupts Python code running past `seconds` (main thread only; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum, frame):
        raise _TaskTimeout()

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_NO_CUDA_MARKERS = ("not compiled with cuda", "no cuda gpus are available", "found no nvidia driver", "cuda driver")


def _needs_cuda(exc: BaseException | None) -> bool:
    return exc is not None and any(m in str(exc).lower() for m in _NO_CUDA_MARKERS)


def _validate(task: Task, device: str) -> Any:
    import torch

    module = task.module
    missing = [n for n in REQUIRED_NAMES if not hasattr(module, n)]
    if missing:
        raise TaskError(
            f"{task.filename} does not define {', '.join(missing)}; a task needs Model, get_inputs and get_init_inputs"
        )
    if not (isinstance(module.Model, type) and issubclass(module.Model, torch.nn.Module)):
        raise TaskError(f"{task.filename}: Model must be a subclass of torch.nn.Module")
    for name in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, name)):
            raise TaskError(f"{task.filename}: {name} must be a function")
    outputs = []
    for forward_seed in (1234, 98765):
        model = task.build_model(seed=7, device=device)
        inputs = task.make_inputs(seed=11, device=device)
        with seeded(forward_seed, device):
            outputs.append(task.run(model, inputs))
    if not _same(outputs[0], outputs[1]):
        raise TaskError(
            f"{task.filename}: the reference gives different outputs for the same weights and inputs; it must be "
            "deterministic (no dropout, no random ops in forward)"
        )
    _check_output_kinds(task, outputs[0])
    return outputs[0]


def _check_output_kinds(task: Task, out: Any) -> None:
    import torch

    if isinstance(out, torch.Tensor):
        return
    if isinstance(out, (list, tuple)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return
    raise TaskError(
        f"{task.filename}: the reference returns {type(out).__name__}; forward must return a tensor or a tuple/list "
        "of tensors"
    )


def _same(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not (a.is_floating_point() or a.is_complex()):
            return torch.equal(a, b)
        return torch.allclose(a, b, rtol=DETERMINISM_RTOL, atol=DETERMINISM_ATOL, equal_nan=True)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


# torch's default generator is one per process: threads drawing under their own seeds at once (evaluator ports of
# several episodes in one process, the sessions of a `cudagent serve` worker) would mix their draws.
_SEEDED = threading.RLock()


@contextmanager
def seeded(seed: int, device: str):
    """Run the block with torch's default generators at `seed`, restored after, one thread at a time."""
    import torch

    with _SEEDED, torch.random.fork_rng(devices=_rng_devices(device)):
        torch.manual_seed(seed)
        yield


def _rng_devices(device: str) -> list:
    return [0] if str(device).startswith("cuda") else []


def _exec_task(task: Task) -> types.ModuleType:
    name = f"cudagent_task_{task.sha256[:16]}"
    if name in sys.modules:
        return sys.modules[name]
    try:
        code = compile(task.source, task.filename, "exec")
    except SyntaxError as exc:
        raise TaskError(f"{task.filename}:{exc.lineno}: syntax error: {exc.msg}; fix the task file") from exc
    except ValueError as exc:
        raise TaskError(f"{task.filename}: cannot be compiled ({exc})") from exc
    module = types.ModuleType(name)
    module.__file__ = task.filename
    # Registered so that torch.compile (which looks functions' modules up) can trace the reference.
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except ModuleNotFoundError as exc:
        del sys.modules[name]
        raise TaskError(
            f"{task.filename} imports {exc.name!r}, which is not installed; install it or remove the import"
        ) from exc
    except Exception as exc:
        del sys.modules[name]
        raise TaskError(f"{task.filename} raised {_describe(exc, task)} when loaded") from exc
    return module


def _describe(exc: BaseException, task: Task) -> str:
    """`ValueError: message (at model.py:12)`, naming the deepest frame inside the task file."""
    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == task.filename:
            where = f" (at {Path(frame.filename).name}:{frame.lineno})"
            break
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg}{where}" if msg else f"{type(exc).__name__}{where}"


def randomized_state(model, seed: int) -> dict:
    """A copy of the model's state with every floating parameter and buffer redrawn.

    Values keep their sign structure and rough scale (so BatchNorm variances stay positive, LayerNorm weights stay
    near one) but nothing keeps its default: a candidate that folded a freshly initialized layer away fails.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    state = {}
    for key, value in model.state_dict().items():
        if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0):
            state[key] = copy.deepcopy(value)
            continue
        v = value.detach().float().cpu()
        u = torch.rand(v.shape, generator=gen) + 0.5  # uniform in [0.5, 1.5)
        spread = float(v.std()) if v.numel() > 1 else 0.0
        if spread > 0:
            if bool((v >= 0).all()):
                new = v * u
            else:
                new = torch.randn(v.shape, generator=gen) * v.std() + v.mean()
        elif float(v.abs().max()) == 0.0:
            new = torch.randn(v.shape, generator=gen) * 0.1
        else:
            new = v * u  # a constant (BatchNorm var 1, LayerNorm weight 1) becomes varied, same sign
        state[key] = new.to(value.dtype).to(value.device)
    return state
