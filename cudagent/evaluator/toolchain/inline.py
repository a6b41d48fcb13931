"""KernelBench's single-file candidates (`load_inline`) built by the trusted build, never in the candidate's process.

A KernelBench candidate calls torch.utils.cpp_extension.load_inline while model_new.py is imported (or while ModelNew
is made); torch would then write `main.cpp` (and `cuda.cu`) and compile them inside the process that runs the
candidate. Here every such call is compiled by the trusted build, in the build's jail, before any candidate code
runs, and the candidate's process only ever imports modules it was handed:

- `extract` reads the calls from model_new.py without running it: arguments that are literals, or module-level names
  bound once to literals (strings joined, concatenated or formatted from such names included). A call it cannot read
  (arguments computed at run time) is counted: the evaluator then imports model_new.py in a jailed process whose
  `load_inline` only records what it is asked for (`install(record=True)`), builds that, and imports again;
- `build` compiles the very files torch would write, with the flags torch would use, through the workspace builds'
  ninja rules (extension.py): the machine's object cache and precompiled torch headers (objcache.py, pch.py), into
  a folder of the machine's cache kept per call (`folder_for`: the same call is built once per machine); `cuda.cu`
  reads torch/types.h where the sources include the whole C++ frontend and need none of it (`lean_cuda_cu`: half
  of nvcc's time), as written where that does not compile;
- `install` (child.py, before model_new.py is imported) puts a `load_inline` in torch's place that imports the
  handed-in module whose key the call's own arguments hash to, and refuses any other call: a module is only ever
  used for the sources it was built from, and nothing is compiled after the link audit read what was built.
  torch's `load` (sources from files) is refused the same way.

Only flags known to be harmless are compiled (optimization, warnings, macros, architectures, the usual math and
ptxas switches, the CUDA libraries): a candidate's `-fplugin=`, `-B`, `-ccbin`, `@file` and the like would run code
in the build, so a call with any other flag is refused. Extra include folders must lie in the toolchain, Python's
packages or CUDA (the build's view holds nothing else).

One module of about 520 lines: reading a call, building it and serving it in the candidate's process agree on one
key (InlineSpec.key), kept side by side so that they cannot drift apart.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import re
import shlex
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cudagent.device.info import DeviceInfo
from cudagent.syntax import parse

MAX_NAME_DEPTH = 20
_FRONTEND_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]torch/(?:extension|torch|all)\.h[>\"][ \t]*$", re.M)
_NEEDS_FRONTEND = re.compile(
    r"\bpy::|pybind11|PYBIND11_|\bTHP|\btorch::(?:nn|optim|autograd|jit|data|serialize|python)\b"
)
LEAN_ENV = "CUDAGENT_LEAN_INCLUDES"  # 0: cuda.cu compiled as written (lean_cuda_cu)
# What a unit that misses a declaration says (nvcc's front end, g++): only such a failure is tried again as written
_UNDECLARED = re.compile(
    r"is undefined|was not declared|has no member|is not a member|incomplete type|no instance of|no matching function"
    r"|does not name a|no template named|not a class or namespace|undefined reference"
)
_SAFE_FLAG = re.compile(
    r"""^(
        -O[0-3s]? | -g | -w | -W[a-z0-9=+_-]* | -D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.+-]*)? | -U[A-Za-z_][A-Za-z0-9_]*
      | -std=c\+\+(14|17|20|23) | -f(fast-math|unroll-loops|no-strict-aliasing|openmp|PIC|no-math-errno)
      | -march=native | -mtune=native | -m(avx2|fma|avx512f)
      | --?use_fast_math | -lineinfo | --expt-relaxed-constexpr | --expt-extended-lambda | --extended-lambda
      | (-Xptxas|--ptxas-options)[= ]?(-v|-O[0-3]|--verbose|-dlcm=c[ag]|-warn-spills
                                      |--allow-expensive-optimizations=(true|false))
      | -Xptxas | -v | --resource-usage | -maxrregcount[= ]?\d+ | --maxrregcount[= ]?\d+
      | --?ftz=(true|false) | --?prec-div=(true|false) | --?prec-sqrt=(true|false) | --?fmad=(true|false)
      | -gencode[= ]?arch=compute_\d+a?,code=(sm|compute)_\d+a? | -arch[= ]?(sm|compute)_\d+a? | --threads[= ]?\d+
      | -Xcompiler[= ]?(-O[0-3]|-fPIC|-ffast-math|-funroll-loops|-march=native|-fopenmp|-w|-Wall)
      | -Xcompiler | -l(cublas|cublasLt|cudnn|curand|cusparse|cufft|cuda|cudart|gomp)
    )$""",
    re.X,
)


class Unreadable(Exception):
    """An argument of a load_inline call that cannot be known without running model_new.py."""


@dataclass(frozen=True)
class InlineSpec:
    """A load_inline call's arguments, normalized as torch normalizes them."""

    name: str
    cpp_sources: tuple[str, ...]
    cuda_sources: tuple[str, ...]
    functions: tuple[tuple[str, str], ...] | None
    extra_cflags: tuple[str, ...]
    extra_cuda_cflags: tuple[str, ...]
    extra_ldflags: tuple[str, ...]
    extra_include_paths: tuple[str, ...]
    with_cuda: bool
    with_pytorch_error_handling: bool
    no_implicit_headers: bool

    @classmethod
    def of_call(cls, args: tuple, kwargs: dict) -> InlineSpec | None:
        """The spec of `load_inline(*args, **kwargs)`, or None for a call this build does not take over (not a
        Python module, SYCL sources, arguments of unexpected types)."""
        from torch.utils.cpp_extension import load_inline

        try:
            bound = inspect.signature(load_inline).bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        a = bound.arguments
        if not a.get("is_python_module", True) or a.get("sycl_sources"):
            return None
        try:
            cuda = _strings(a.get("cuda_sources"))
            spec = cls(
                name=_text(a["name"]),
                cpp_sources=_strings(a["cpp_sources"]),
                cuda_sources=cuda,
                functions=_functions(a.get("functions")),
                extra_cflags=tuple(f.strip() for f in _strings(a.get("extra_cflags"))),
                extra_cuda_cflags=tuple(f.strip() for f in _strings(a.get("extra_cuda_cflags"))),
                extra_ldflags=tuple(f.strip() for f in _strings(a.get("extra_ldflags"))),
                extra_include_paths=tuple(os.path.abspath(p.strip()) for p in _strings(a.get("extra_include_paths"))),
                with_cuda=bool(cuda) if a.get("with_cuda") is None else bool(a["with_cuda"]),
                with_pytorch_error_handling=bool(a.get("with_pytorch_error_handling", True)),
                no_implicit_headers=bool(a.get("no_implicit_headers", False)),
            )
        except (TypeError, ValueError):
            return None
        return spec if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", spec.name) else None

    def key(self) -> str:
        """What the built module is filed under: the call's arguments (its flags among them) and torch's version."""
        import torch

        text = json.dumps([asdict(self), torch.__version__], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def safe(self) -> bool:
        """Whether every flag the call passes may be compiled in the trusted build (see the module's docstring)."""
        flags = self.extra_cflags + self.extra_cuda_cflags + self.extra_ldflags
        return all(not f or _SAFE_FLAG.match(f) for f in flags)

    def main_cpp(self) -> str:
        """main.cpp as load_inline writes it."""
        lines = list(self.cpp_sources)
        if not self.no_implicit_headers:
            lines.insert(0, "#include <torch/extension.h>")
        if self.functions is not None:
            lines.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
            for fn, doc in self.functions:
                bound = f"torch::wrap_pybind_function({fn})" if self.with_pytorch_error_handling else fn
                lines.append(f'm.def("{fn}", {bound}, "{doc}");')
            lines.append("}")
        return "\n".join(lines)

    def own_lines(self):
        """The candidate's lines in main.cpp and cuda.cu (the rest is what load_inline writes around them), for the
        audit of the preprocessed sources (audit/expanded_scan.py)."""
        from cudagent.evaluator.toolchain.expanded import OwnFile

        def span(sources: tuple[str, ...], first: int, what: str) -> OwnFile:
            count = sum(s.count("\n") + 1 for s in sources)
            return OwnFile(f"load_inline({self.name!r}) {what}", first, first + count - 1)

        implicit = 0 if self.no_implicit_headers else 1
        own = {"main.cpp": span(self.cpp_sources, 1 + implicit, "cpp_sources")}
        if self.cuda_sources:
            own["cuda.cu"] = span(self.cuda_sources, 1 + 3 * implicit, "cuda_sources")
        return own

    def cuda_cu(self) -> str | None:
        """cuda.cu as load_inline writes it, or None without CUDA sources."""
        if not self.cuda_sources:
            return None
        head = (
            []
            if self.no_implicit_headers
            else ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
        )
        return "\n".join(head + list(self.cuda_sources))

    def lean_cuda_cu(self) -> str | None:
        """cuda.cu with the candidate's includes of the whole C++ frontend (torch/extension.h, torch/torch.h,
        torch/all.h: nn, optim, autograd, serialization and the Python bindings) read as torch/types.h (tensors,
        their operators and factories), line for line; None where that cannot apply: no such include, or sources
        that name something only the frontend or the bindings declare. A unit that compiles either way compiles
        to the same code; nvcc parses the frontend twice, for the device and for the host, so this roughly halves
        the unit's build (84 s to 37 s for KernelBench's fused-GELU example on two cores). One that does not
        compile lean is compiled as written (build); CUDAGENT_LEAN_INCLUDES=0 always compiles it as written."""
        cuda = self.cuda_cu()
        if cuda is None or not _FRONTEND_INCLUDE.search(cuda) or _NEEDS_FRONTEND.search(cuda):
            return None
        return _FRONTEND_INCLUDE.sub("#include <torch/types.h>", cuda)


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _strings(value) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(_text(v) for v in value)
    raise TypeError("not a string or a list of strings")


def _functions(value) -> tuple[tuple[str, str], ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)):
        return tuple((_text(f), _text(f)) for f in value)
    if isinstance(value, dict):
        return tuple((_text(k), _text(v)) for k, v in value.items())
    raise TypeError("functions must be a string, a list or a dict")


# ----- reading the calls -----------------------------------------------------------------------------------------


def extract(source: str) -> tuple[list[InlineSpec], int]:
    """(the specs of the load_inline calls that can be read without running anything, how many calls could not be
    read or are left to torch). Unparsable source: ([], 0) (importing it fails anyway)."""
    try:
        tree = parse(source)
    except SyntaxError:
        return [], 0
    aliases = {"load_inline"} | {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for a in node.names
        if a.name == "load_inline"
    }
    bindings = _module_constants(tree)
    specs, left = [], 0
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _calls_load_inline(node.func, aliases)):
            continue
        try:
            args = tuple(_value(a, bindings) for a in node.args)
            if any(k.arg is None for k in node.keywords):
                raise Unreadable("**kwargs")
            kwargs = {k.arg: _value(k.value, bindings) for k in node.keywords}
        except Unreadable:
            left += 1
            continue
        spec = InlineSpec.of_call(args, kwargs)
        if spec is None or not spec.safe():
            left += 1
        elif spec not in specs:
            specs.append(spec)
    return specs, left


def _calls_load_inline(func: ast.expr, aliases: set[str]) -> bool:
    return (isinstance(func, ast.Name) and func.id in aliases) or (
        isinstance(func, ast.Attribute) and func.attr == "load_inline"
    )


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """Names assigned exactly once, at module level, and never declared global anywhere: their value expressions."""
    counts: dict[str, int] = {}
    values: dict[str, ast.expr] = {}
    for stmt in tree.body:
        targets = []
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets = [stmt.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    counts[n.id] = counts.get(n.id, 0) + 1
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            values[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            values[stmt.target.id] = stmt.value
    for node in ast.walk(tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                counts[name] = 99
        elif isinstance(node, (ast.For, ast.With, ast.Import, ast.ImportFrom)) and node in tree.body:
            for n in ast.walk(node):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    counts[n.id] = 99
                if isinstance(n, ast.alias):
                    counts[n.asname or n.name.split(".")[0]] = 99
    return {k: v for k, v in values.items() if counts.get(k) == 1}


def _value(node: ast.expr, bindings: dict[str, ast.expr], depth: int = 0):
    if depth > MAX_NAME_DEPTH:
        raise Unreadable("too deep")
    rec = lambda n: _value(n, bindings, depth + 1)  # noqa: E731
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, ast.Name) and node.id in bindings:
        return rec(bindings[node.id])
    if isinstance(node, (ast.List, ast.Tuple)):
        return [rec(e) for e in node.elts]
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {rec(k): rec(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.JoinedStr):
        return "".join(rec(v) for v in node.values)
    if isinstance(node, ast.FormattedValue) and node.conversion == -1 and node.format_spec is None:
        value = rec(node.value)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = rec(node.left), rec(node.right)
        if type(left) is type(right) and isinstance(left, (str, list)):
            return left + right
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and len(node.args) == 1
        and not node.keywords
    ):
        sep, items = rec(node.func.value), rec(node.args[0])
        if isinstance(sep, str) and isinstance(items, list) and all(isinstance(i, str) for i in items):
            return sep.join(items)
    raise Unreadable(ast.dump(node)[:80])


# ----- building --------------------------------------------------------------------------------------------------


class NotBuilt(RuntimeError):
    """load_inline was called, while the evaluator was finding out which calls a candidate makes, with arguments
    that have not been built yet."""


def module_path(prebuilt: Path, spec: InlineSpec) -> Path:
    """Where a hand-in holds the module of `spec`."""
    return Path(prebuilt) / spec.key() / f"{spec.name}.so"


def folder_for(spec: InlineSpec, device: DeviceInfo) -> Path:
    """The machine's build folder of one call: its key and the device's architecture name it."""
    from cudagent.resources import cache_dir

    return cache_dir() / "inline" / (device.arch if device.is_cuda and device.arch else "cpu") / spec.key()


def include_problem(spec: InlineSpec) -> str | None:
    """Why the call's extra include folders may not be read by the build, or None."""
    from cudagent.boundary.bwrap import system_paths

    allowed = [p for p in system_paths() if p not in ("/sys", "/run/nvidia-persistenced")]
    for folder in spec.extra_include_paths:
        real = os.path.realpath(folder)
        if not any(real == a or real.startswith(a.rstrip("/") + "/") for a in allowed):
            return (
                f"load_inline({spec.name!r}): extra_include_paths may only name folders of the toolchain, Python's "
                f"packages or CUDA; {folder} is none of them (put headers in the sources themselves)"
            )
    return None


def build(spec: InlineSpec, device: DeviceInfo, timeout_s: float, jail=None, pch_only: bool = False):
    """Compile the spec's main.cpp and cuda.cu into `folder_for(spec, device)/<name>.so` (a BuildResult), in the
    build's jail; one build of a call at a time on a machine, and a call already built costs a ninja no-op.
    `pch_only`: make only the precompiled headers its C++ units would compile with (extension.run_ninja)."""
    import fcntl

    from cudagent.evaluator.toolchain.extension import (
        BuildResult,
        Unit,
        expansions,
        run_ninja,
        summarize_output,
        toolchain_for,
        torch_flags,
        trim_build_folders,
    )

    start = time.monotonic()
    if not spec.safe():
        flags = [f for f in spec.extra_cflags + spec.extra_cuda_cflags + spec.extra_ldflags if not _SAFE_FLAG.match(f)]
        return BuildResult(
            False,
            0.0,
            errors=f"load_inline({spec.name!r}): the flags {flags} are not among those the evaluator compiles "
            "(optimization, warnings, macros, architectures, math and ptxas switches, the CUDA libraries)",
        )
    problem = include_problem(spec)
    if problem:
        return BuildResult(False, 0.0, errors=problem)
    tc = toolchain_for(device)
    if spec.with_cuda and not tc.cuda:
        return BuildResult(
            False,
            0.0,
            errors=f"load_inline({spec.name!r}) builds CUDA sources: this needs a GPU (this check runs on the CPU)",
        )
    folder = folder_for(spec, device)
    if not folder.is_dir():
        folder.mkdir(parents=True)
        trim_build_folders(folder.parent)
    os.utime(folder)  # recently used: the last to go when the folders are trimmed
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        units = [Unit(_write(folder / "main.cpp", spec.main_cpp()), "cxx")]
        cuda = spec.cuda_cu()
        lean = spec.lean_cuda_cu() if os.environ.get(LEAN_ENV, "1") != "0" else None
        if cuda is not None:
            units.append(Unit(_write(folder / "cuda.cu", lean or cuda), "nvcc"))
        includes = [f"-I{shlex.quote(p)}" for p in spec.extra_include_paths]
        cflags, nvcc_flags, ldflags = torch_flags(tc, spec.name, with_cuda=spec.with_cuda, local_includes=includes)
        cflags += list(spec.extra_cflags)
        if any("arch" in f for f in spec.extra_cuda_cflags):  # torch adds its own architectures only without ours
            nvcc_flags = [f for f in nvcc_flags if not f.startswith("-gencode=")]
        nvcc_flags += list(spec.extra_cuda_cflags)
        if not any(f.startswith("-std=") for f in spec.extra_cuda_cflags):
            nvcc_flags.append("-std=c++20")
        ldflags = ["-shared", *spec.extra_ldflags, *ldflags]

        def ninja():
            return run_ninja(
                tc,
                folder,
                units,
                (cflags, nvcc_flags, ldflags),
                f"{spec.name}.so",
                timeout_s,
                start,
                summarize=lambda output: summarize_output(output, [str(folder) + os.sep]),
                jail=jail,
                read=list(spec.extra_include_paths),
                pch_only=pch_only,
            )

        built = ninja()
        if pch_only:
            return built
        if lean is not None and not built.ok and _UNDECLARED.search(built.log or built.errors):  # as written, then
            _write(folder / "cuda.cu", cuda)
            recompiled = built.recompiled
            built = ninja()
            built.recompiled = recompiled + [r for r in built.recompiled if r not in recompiled]
            built.notes.append("cuda.cu did not compile with torch/types.h for torch/extension.h: built as written")
        elif lean is not None and built.ok:
            built.notes.append("cuda.cu built with torch/types.h for the whole C++ frontend it included")
    if built.ok:
        built.expanded = expansions(folder, units, spec.own_lines(), source_name=lambda src: src.name)
    return built


def _write(path: Path, text: str) -> Path:
    if not (path.is_file() and path.read_text() == text):
        path.write_text(text)
    return path


# ----- the candidate's process -----------------------------------------------------------------------------------


def install(prebuilt: str, record: bool = False) -> dict:
    """Put a load_inline in torch's place that imports the handed-in module of a call whose arguments were built, and
    refuses any other (with record=True, it notes the call's arguments and raises NotBuilt: the evaluator builds
    them and asks again). torch's `load` is refused. Returns the record: the names served, the specs asked for."""
    import importlib.util

    import torch.utils.cpp_extension as cpp_extension

    original = cpp_extension.load_inline
    served: dict = {"prebuilt": [], "wanted": []}

    def load_inline(*args, **kwargs):
        spec = InlineSpec.of_call(args, kwargs)
        if spec is None:
            raise RuntimeError(
                "cudagent: this load_inline call cannot be built by the evaluator (not a Python module, SYCL "
                "sources, or arguments of unexpected types)"
            )
        path = module_path(Path(prebuilt), spec)
        if not path.is_file():
            if record:
                served["wanted"].append(asdict(spec))
                raise NotBuilt(f"load_inline(name={spec.name!r}) is built by the evaluator first")
            raise RuntimeError(
                f"cudagent: load_inline(name={spec.name!r}) was called with arguments that were not built before "
                "the candidate ran; every extension is built and audited before any candidate code runs, so make "
                "each call at import or in ModelNew.__init__, with the same arguments every time"
            )
        module_spec = importlib.util.spec_from_file_location(spec.name, path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        served["prebuilt"].append(spec.name)
        return module

    def load(*args, **kwargs):
        raise RuntimeError(
            "cudagent: torch.utils.cpp_extension.load (sources from files) is not supported: give the sources to "
            "load_inline, or write a workspace (kernels/ and cuda_extension)"
        )

    load_inline.__wrapped__ = original
    cpp_extension.load_inline = load_inline
    cpp_extension.load = load
    return served


def spec_from_dict(d: dict) -> InlineSpec | None:
    """An InlineSpec from what a candidate's process recorded (untrusted): every field checked; None if any is off."""
    try:
        spec = InlineSpec(
            name=_text(d["name"]),
            cpp_sources=tuple(_text(s) for s in d["cpp_sources"]),
            cuda_sources=tuple(_text(s) for s in d["cuda_sources"]),
            functions=None if d["functions"] is None else tuple((_text(a), _text(b)) for a, b in d["functions"]),
            extra_cflags=tuple(_text(s) for s in d["extra_cflags"]),
            extra_cuda_cflags=tuple(_text(s) for s in d["extra_cuda_cflags"]),
            extra_ldflags=tuple(_text(s) for s in d["extra_ldflags"]),
            extra_include_paths=tuple(_text(s) for s in d["extra_include_paths"]),
            with_cuda=d["with_cuda"] is True,
            with_pytorch_error_handling=d["with_pytorch_error_handling"] is not False,
            no_implicit_headers=d["no_implicit_headers"] is True,
        )
    except (KeyError, TypeError, ValueError):
        return None
    return spec if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", spec.name) else None
