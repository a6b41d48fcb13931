"""A user's own model, built from what the command line names: an `nn.Module` class in a Python file
(`model.py:Block`, or the file's only module class), or a Hugging Face transformers model in a directory (`--hf`;
a config alone builds it with random weights).

Its example inputs come from, in this order: `--inputs` (inputs.py's notation), the first forward call of the
class seen while running `--example script.py` (shapes, dtypes and Python values; and that instance's weights),
or a `get_inputs()` in the file. Constructor arguments: `--init` (a Python list, or a dict of keywords) or a
`get_init_inputs()` in the file. Every way this can fail is one sentence saying what to give instead.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import runpy
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.errors import CudagentError
from cudagent.usermodel.inputs import Inputs, InputSpecError, TensorSpec, describe, parse


class UserModelError(CudagentError):
    """The model or its inputs cannot be had from what was given."""


@dataclass
class UserModel:
    name: str  # what the reports call it: model.py:Block, hf:gpt2-small
    build: Callable  # () -> a fresh nn.Module on the CPU, eval mode, with its real (or captured) weights
    inputs: Inputs
    source: str = ""  # how it was built, in words
    notes: list[str] = field(default_factory=list)
    # what to do when build() fails: a class of the user's takes constructor arguments; transformers needs what its
    # model type imports
    remedy: str = (
        "give its constructor arguments with --init, e.g. --init '[768, 3072]' or --init \"{'dim': 768}\", or a "
        "get_init_inputs() in the file"
    )

    def make(self, seed: int, device: str, dtype: str | None = None) -> tuple:
        """(model on `device`, args, kwargs) with fresh inputs drawn from `seed`; `dtype` (bfloat16, float16,
        float32): the model's floating weights and the floating inputs in it, as users run models."""
        try:
            model = self.build()
        except UserModelError:
            raise
        except Exception as exc:  # noqa: BLE001  (the user's constructor: any failure is reported as one)
            why = f"{type(exc).__name__}: {exc}"
            raise UserModelError(f"{self.name} could not be built ({why}); {self.remedy}") from None
        model = model.to(device).eval()
        if dtype:
            import torch

            model = model.to(getattr(torch, dtype))
        args, kwargs = self.make_inputs(seed, device, dtype)
        return model, args, kwargs

    def make_inputs(self, seed: int, device: str, dtype: str | None = None) -> tuple[list, dict]:
        """Fresh inputs drawn from `seed`, the floating ones in `dtype` when given (as make() gives them)."""
        args, kwargs = self.inputs.make(seed, device)
        if not dtype:
            return args, kwargs
        import torch

        wanted = getattr(torch, dtype)
        cast = lambda v: v.to(wanted) if isinstance(v, torch.Tensor) and v.is_floating_point() else v  # noqa: E731
        return [cast(a) for a in args], {k: cast(v) for k, v in kwargs.items()}


def load_user_model(
    target: str | None,
    module: str | None = None,
    inputs: str | None = None,
    init: str | None = None,
    example: Path | None = None,
    hf: Path | None = None,
) -> UserModel:
    if hf is not None:
        if target or module or example:
            raise UserModelError("--hf builds the model from a directory; give no model file, --module or --example")
        return _hf_model(Path(hf), inputs)
    if not target:
        raise UserModelError("give the model: a file with its class (model.py:Block) or --hf DIRECTORY")
    path_text, _, class_name = target.partition(":")
    if module and class_name and module != class_name:
        raise UserModelError(f"{target} names the class {class_name} and --module names {module}; give one")
    path = Path(path_text)
    if not path.is_file():
        raise UserModelError(f"{path} does not exist; give the Python file that defines your module")
    written = _parse_inputs(inputs) if inputs is not None else None  # a bad spec: one sentence before torch loads
    namespace = _import_file(path)
    cls = _module_class(namespace, path, class_name or module)
    init_args, init_kwargs = _init_arguments(namespace, path, init)
    label = f"{path.name}:{cls.__name__}"
    captured = None
    if written is not None:
        spec = written
    elif example is not None:
        spec, captured = capture_example(Path(example), path, cls.__name__)
    elif callable(namespace.get("get_inputs")):
        spec = _from_get_inputs(namespace["get_inputs"], path)
    else:
        raise UserModelError(
            f"{label} has no example inputs: give --inputs 'x=f32[8,1024]', --example script.py (a script that "
            f"calls the model), or a get_inputs() in {path.name}"
        )

    def build():
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = cls(*init_args, **init_kwargs)
        if captured is not None:
            model.load_state_dict(captured)
        return model.eval()

    how = f"{cls.__name__}(*{init_args!r}, **{init_kwargs!r})" + (" with the weights --example ran" if captured else "")
    return UserModel(label, build, spec, how)


def capture_example(script: Path, model_file: Path, class_name: str) -> tuple[Inputs, dict | None]:
    """Run the user's script and keep the first forward call of a module of that class defined in that file: its
    inputs as specs, and its weights."""
    import torch
    from torch.nn.modules import module as nn_module

    if not script.is_file():
        raise UserModelError(f"{script} does not exist; give a script that builds and calls your model")
    wanted = model_file.resolve()
    seen: list = []

    def hook(mod, args, kwargs, output):
        if seen or type(mod).__name__ != class_name:
            return
        try:
            defined = Path(inspect.getfile(type(mod))).resolve()
        except TypeError:
            return
        if defined == wanted:
            with torch.no_grad():
                state = {k: v.detach().to("cpu", copy=True) for k, v in mod.state_dict().items()}
            seen.append((describe(args, kwargs), state))

    handle = nn_module.register_module_forward_hook(hook, with_kwargs=True)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script)]
    sys.path[:0] = [str(model_file.parent.resolve())]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise UserModelError(f"{script.name} exited with status {exc.code} before cudagent saw a call") from None
    except InputSpecError as exc:
        raise UserModelError(f"{script.name} called {class_name} with inputs cudagent cannot take: {exc}") from None
    except Exception as exc:  # noqa: BLE001  (the user's script)
        raise UserModelError(f"{script.name} raised {type(exc).__name__}: {exc}") from None
    finally:
        handle.remove()
        sys.argv, sys.path[:] = saved_argv, saved_path
    if not seen:
        raise UserModelError(
            f"{script.name} ran without calling a {class_name} from {model_file.name}; give a script that runs the "
            "model forward once (or --inputs)"
        )
    return seen[0]


def _hf_model(directory: Path, inputs: str | None) -> UserModel:
    if not (directory / "config.json").is_file():
        raise UserModelError(f"{directory} holds no config.json; give a transformers model directory")
    try:
        from transformers import AutoConfig, AutoModel
    except ImportError as exc:
        if exc.name == "transformers":
            raise UserModelError("--hf needs the transformers package: pip install transformers") from None
        raise UserModelError(f"transformers could not be imported ({exc}); install what it names") from None
    try:
        config = AutoConfig.from_pretrained(directory)
    except (ImportError, ValueError, OSError) as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise UserModelError(f"transformers cannot read {directory}/config.json ({why})") from None
    weights = any(
        (directory / f).exists()
        for f in (
            "model.safetensors",
            "model.safetensors.index.json",
            "pytorch_model.bin",
            "pytorch_model.bin.index.json",
        )
    )
    vocab = getattr(config, "vocab_size", None) or 32000
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 128
    default = Inputs((), (("input_ids", TensorSpec("int64", (1, min(128, positions)), vocab)),))
    spec = _parse_inputs(inputs) if inputs else default

    caches = bool(getattr(config, "use_cache", False))

    def build():
        import torch

        if weights:
            model = AutoModel.from_pretrained(directory)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model = AutoModel.from_config(config)
        if caches:  # the forward being optimized returns no key/value cache (torch.export refuses one)
            model.config.use_cache = False
        return model.eval()

    notes = [] if weights else ["no weights in the directory: built from its config with random weights"]
    if caches:
        notes.append("its key/value cache is off for the forward being optimized (in memory: config.json is untouched)")
    remedy = (
        f"transformers could not make this model type ({getattr(config, 'model_type', '?')}) from {directory}: "
        "install what the message names (pip install ...), or a transformers version that knows the type"
    )
    return UserModel(f"hf:{directory.name}", build, spec, f"AutoModel from {directory}", notes, remedy)


def _parse_inputs(text: str) -> Inputs:
    try:
        return parse(text)
    except InputSpecError as exc:
        raise UserModelError(f"--inputs: {exc}") from None


def _import_file(path: Path) -> dict:
    name = f"cudagent_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent.resolve()))  # the file's own imports of its neighbours
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001  (the user's file)
        raise UserModelError(f"importing {path.name} raised {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.pop(0)
    return vars(module)


def _module_class(namespace: dict, path: Path, wanted: str | None):
    import torch

    own = {
        n: v
        for n, v in namespace.items()
        if isinstance(v, type) and issubclass(v, torch.nn.Module) and v.__module__ == namespace["__name__"]
    }
    if wanted:
        if wanted not in own:
            listed = ", ".join(sorted(own)) or "none"
            raise UserModelError(f"{path.name} defines no module class {wanted} (its module classes: {listed})")
        return own[wanted]
    if len(own) == 1:
        return next(iter(own.values()))
    if not own:
        raise UserModelError(f"{path.name} defines no torch.nn.Module class; give the file that defines your model")
    listed = ", ".join(sorted(own))
    example = f"{path.name}:{sorted(own)[0]}"
    raise UserModelError(f"{path.name} defines several module classes ({listed}); name one, e.g. {example}")


def _init_arguments(namespace: dict, path: Path, init: str | None) -> tuple[list, dict]:
    if init is not None:
        try:
            value = ast.literal_eval(init)
        except (ValueError, SyntaxError):
            raise UserModelError(
                f"--init {init!r} is not a Python list or dict of values; e.g. --init '[768, 3072]'"
            ) from None
        if isinstance(value, dict):
            return [], value
        return list(value) if isinstance(value, (list, tuple)) else [value], {}
    if callable(namespace.get("get_init_inputs")):
        try:
            return list(namespace["get_init_inputs"]()), {}
        except Exception as exc:  # noqa: BLE001
            raise UserModelError(f"get_init_inputs() in {path.name} raised {type(exc).__name__}: {exc}") from None
    return [], {}


def _from_get_inputs(get_inputs, path: Path) -> Inputs:
    try:
        values = get_inputs()
    except Exception as exc:  # noqa: BLE001
        raise UserModelError(f"get_inputs() in {path.name} raised {type(exc).__name__}: {exc}") from None
    if isinstance(values, dict):
        return describe([], values)
    try:
        return describe(list(values), {})
    except InputSpecError as exc:
        raise UserModelError(f"get_inputs() in {path.name}: {exc}") from None
