"""Static audit of model_new.py (its Python AST). Runs in the trusted parent, before any candidate code runs.

It reads names through import aliases (`import torch as T; T.compile` is torch.compile) and reports each
violation with its line and what to do instead. The kernels' C++ is scanned by kernel_scan.py; C++ held in
Python strings (KernelBench's load_inline format) is scanned too.

It stays one module (over 400 lines): its rules and the tables of names they use are read together when a rule
changes; most of the length is those tables.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import types
from dataclasses import dataclass

from cudagent.evaluator.audit.kernel_scan import scan_cpp
from cudagent.evaluator.audit.op_policy import TORCH_NAMESPACES
from cudagent.evaluator.verdict import Violation
from cudagent.syntax import parse

ALLOWED_MODULES = frozenset(
    "torch math typing typing_extensions dataclasses functools itertools collections numbers enum abc operator "
    "cuda_extension os __future__ warnings".split()
)
FORBIDDEN_TORCH = {
    "torch._dynamo": "TORCH_COMPILE",
    "torch._inductor": "TORCH_COMPILE",
    "torch.compile": "TORCH_COMPILE",
    "torch.jit": "TORCH_COMPILE",
    "torch.fx": "TORCH_COMPILE",
    "torch.export": "TORCH_COMPILE",
    "torch._C": "PRIVATE_TORCH_API",
    "torch._ops": "PRIVATE_TORCH_API",
    "torch.ops.aten": "PRIVATE_TORCH_API",
    "torch.ops.prims": "PRIVATE_TORCH_API",
    "torch._prims": "PRIVATE_TORCH_API",
    "torch._refs": "PRIVATE_TORCH_API",
    "torch._decomp": "PRIVATE_TORCH_API",
    "torch._subclasses": "TENSOR_SUBCLASS",
    "torch.overrides": "TENSOR_SUBCLASS",
    "torch.utils._python_dispatch": "PRIVATE_TORCH_API",
    "torch.library": "PRIVATE_TORCH_API",
    "torch._library": "PRIVATE_TORCH_API",
    "torch.utils._pytree": "PRIVATE_TORCH_API",
    "torch.cuda.Stream": "STREAM_USE",
    "torch.cuda.stream": "STREAM_USE",
    "torch.cuda.set_stream": "STREAM_USE",
    "torch.cuda.ExternalStream": "STREAM_USE",
    "torch.Stream": "STREAM_USE",
    "torch.cuda.StreamContext": "STREAM_USE",
    "torch.cuda.graph": "CUDA_GRAPH",
    "torch.cuda.graphs": "CUDA_GRAPH",
    "torch.cuda.CUDAGraph": "CUDA_GRAPH",
    "torch.cuda.make_graphed_callables": "CUDA_GRAPH",
    "torch.manual_seed": "RNG_MANIPULATION",
    "torch.seed": "RNG_MANIPULATION",
    "torch.random": "RNG_MANIPULATION",
    "torch.cuda.manual_seed": "RNG_MANIPULATION",
    "torch.cuda.manual_seed_all": "RNG_MANIPULATION",
    "torch.set_rng_state": "RNG_MANIPULATION",
    "torch.get_rng_state": "RNG_MANIPULATION",
    "torch.cuda.set_rng_state": "RNG_MANIPULATION",
    "torch.cuda.get_rng_state": "RNG_MANIPULATION",
    "torch.initial_seed": "RNG_MANIPULATION",
    "torch.load": "FILE_IO",
    "torch.save": "FILE_IO",
    "torch.from_file": "FILE_IO",
    "torch.profiler": "TIMING_AWARE",
    "torch.autograd.profiler": "TIMING_AWARE",
    "torch.cuda.Event": "TIMING_AWARE",
    "torch.utils.benchmark": "TIMING_AWARE",
    "torch.cuda.nvtx": "TIMING_AWARE",
    "torch.multiprocessing": "PROCESS_OR_SYSTEM",
    "torch.distributed": "PROCESS_OR_SYSTEM",
    "torch.Tensor._make_subclass": "TENSOR_SUBCLASS",
    "torch.Tensor._make_wrapper_subclass": "TENSOR_SUBCLASS",
    "torch.Tensor.as_subclass": "TENSOR_SUBCLASS",
    "torch.hub": "FILE_IO",
    "torch.package": "FILE_IO",
    "torch.serialization": "FILE_IO",
    "torch.ops.import_module": "DYNAMIC_CODE",
    "torch.ops.load_library": "DYNAMIC_CODE",
    "torch.ops.loaded_libraries": "DYNAMIC_CODE",
    "torch.classes": "PRIVATE_TORCH_API",
    **{f"torch.ops.{ns}": "PRIVATE_TORCH_API" for ns in TORCH_NAMESPACES},
}
# Private helpers of plain Python modules that __init__ code uses to mirror the reference's initialization.
PRIVATE_ALLOWED = ("torch.nn.init.",)
# Attribute names that lead to a module no candidate may use, whatever object they are read from.
MODULE_ESCAPES = frozenset("sys os builtins importlib subprocess ctypes gc inspect threading _C __import__".split())
# Module attributes of allowed modules that are other modules, and allowed: the standard library's own aliases.
STDLIB_ALIASES = frozenset({"os.path"})
GLOBAL_STATE_CALLS = frozenset(
    "set_default_dtype set_default_device set_default_tensor_type set_flush_denormal set_float32_matmul_precision "
    "use_deterministic_algorithms set_num_threads set_num_interop_threads set_grad_enabled set_printoptions "
    "set_warn_always set_autocast_enabled".split()
)
DYNAMIC = frozenset({"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "input"})
INTROSPECTION_ATTRS = frozenset(
    "__globals__ __code__ __closure__ __builtins__ __subclasses__ __mro__ __bases__ __class__ __dict__ __self__ "
    "__func__ __wrapped__ f_back f_locals f_globals f_code gi_frame cr_frame tb_frame tb_next _getframe "
    "__reduce__ __reduce_ex__ __getattribute__ __setattr__ __delattr__".split()
)
IDENTITY_ATTRS = frozenset(
    "data_ptr _cdata untyped_storage storage _storage _typed_storage _version __array_interface__ "
    "__cuda_array_interface__ unsafe_get_storage".split()
)
# Ways out of torch to compute elsewhere (NumPy, DLPack consumers, Python lists, buffers); closed at run time too
TENSOR_EXITS = frozenset(
    "numpy __array__ __array_wrap__ __dlpack__ __dlpack_device__ from_numpy from_dlpack to_dlpack frombuffer "
    "asarray tolist".split()
)
OS_ALLOWED = frozenset({"path", "sep", "cpu_count", "getenv", "environ"})
SYS_ALLOWED = frozenset({"version_info", "platform", "maxsize", "byteorder"})
ENV_WRITABLE = frozenset({"TORCH_CUDA_ARCH_LIST", "MAX_JOBS"})
MODULE_ROOTS_PATCHABLE = frozenset(
    {"torch", "math", "os", "sys", "time", "builtins", "functools", "operator", "collections"}
)


@dataclass
class _Finding:
    code: str
    line: int
    message: str


def audit_model_new(source: str, filename: str = "model_new.py") -> list[Violation]:
    """Violations in model_new.py's source; a syntax error is reported as SYNTAX_ERROR."""
    try:
        tree = parse(source, filename=filename)
    except SyntaxError as exc:
        return [Violation("SYNTAX_ERROR", f"{filename}:{exc.lineno}: {exc.msg}")]
    visitor = _Auditor(filename)
    visitor.visit(tree)
    findings = visitor.findings
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        findings.append(
            _Finding("NO_MODELNEW", 1, "defines no top-level class ModelNew; define `class ModelNew(nn.Module)`")
        )
    for node in ast.walk(tree):  # C++ held in strings (load_inline sources)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _looks_like_cpp(node.value):
            for v in scan_cpp(node.value, f"{filename}:{node.lineno} (C++ source string)"):
                findings.append(_Finding(v.code, node.lineno, v.message))
    seen, out = set(), []
    for f in sorted(findings, key=lambda f: f.line):
        key = (f.code, f.line, f.message)
        if key not in seen:
            seen.add(key)
            msg = f.message if f.message.startswith(filename) else f"{filename}:{f.line}: {f.message}"
            out.append(Violation(f.code, msg))
    return out


@functools.cache
def foreign_module(path: str) -> tuple[str, str] | None:
    """(the prefix of `path`, the module it names) where an attribute chain of an allowed module reaches a module
    outside that package (`torch.sys` is `sys`); None if it never does. Read from the real modules, in this
    (trusted) process, without running any candidate code.

    >>> foreign_module("torch.sys.modules"), foreign_module("torch.nn.functional.relu"), foreign_module("os.path.join")
    (('torch.sys', 'sys'), None, None)
    """
    parts = path.split(".")
    if parts[0] not in ALLOWED_MODULES or parts[0] == "cuda_extension":
        return None
    try:
        current = importlib.import_module(parts[0])
    except ImportError:
        return None
    for i, part in enumerate(parts[1:], start=1):
        if not isinstance(current, types.ModuleType):
            return None
        found = current.__dict__.get(part)
        if found is None:
            name = f"{current.__name__}.{part}"
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                return None
            found = importlib.import_module(name)
        prefix = ".".join(parts[: i + 1])
        if isinstance(found, types.ModuleType) and prefix not in STDLIB_ALIASES:
            if found.__name__.split(".")[0] != parts[0]:
                return prefix, found.__name__
        current = found
    return None


def _looks_like_cpp(text: str) -> bool:
    return len(text) > 40 and ("#include" in text or ("{" in text and ";" in text and ("(" in text)))


class _Auditor(ast.NodeVisitor):
    def __init__(self, filename: str):
        self.filename = filename
        self.aliases: dict[str, str] = {}  # local name -> dotted module path it stands for
        self.findings: list[_Finding] = []
        self.pointer_arguments: set[int] = set()  # `x.data_ptr()` nodes passed straight to a call

    def flag(self, node: ast.AST, code: str, message: str) -> None:
        self.findings.append(_Finding(code, getattr(node, "lineno", 1), message))

    # ----- imports -----------------------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_module(node, a.name)
            local = a.asname or a.name.split(".")[0]
            self.aliases[local] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = "." * node.level + (node.module or "")
        if node.level:
            self.flag(node, "FORBIDDEN_IMPORT", f"relative import `{mod}`; model_new.py stands alone")
            return
        self._check_module(node, mod)
        for a in node.names:
            full = f"{mod}.{a.name}"
            self._check_path(node, full)
            self.aliases[a.asname or a.name] = full

    def _check_module(self, node: ast.AST, name: str) -> None:
        root = name.split(".")[0]
        if root in ("model", "reference"):
            self.flag(
                node,
                "REFERENCE_ACCESS",
                f"imports `{name}`: the candidate may not use the reference model; "
                "implement the computation with your kernels",
            )
        elif root not in ALLOWED_MODULES:
            self.flag(
                node,
                "FORBIDDEN_IMPORT",
                f"imports `{name}`; model_new.py may import torch, cuda_extension "
                f"and the standard modules {', '.join(sorted(ALLOWED_MODULES - {'torch', 'cuda_extension'}))}",
            )
        else:
            self._check_path(node, name)

    # ----- names and attributes ----------------------------------------------------------------------------

    def _resolve(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def _check_path(self, node: ast.AST, path: str) -> None:
        for prefix, code in FORBIDDEN_TORCH.items():
            if path == prefix or path.startswith(prefix + "."):
                self.flag(node, code, f"uses `{path}`: {_ADVICE[code]}")
                return
        parts = path.split(".")
        private = any(p.startswith("_") and not p.startswith("__") for p in parts[1:])
        if private and parts[0] == "torch" and not path.startswith(PRIVATE_ALLOWED):
            self.flag(node, "PRIVATE_TORCH_API", f"uses `{path}`: {_ADVICE['PRIVATE_TORCH_API']}")
            return
        escape = foreign_module(path)
        if escape:
            self.flag(
                node,
                "FORBIDDEN_IMPORT",
                f"reaches the module `{escape[1]}` through `{escape[0]}`; model_new.py may use only the modules it "
                "may import, and only through their own names",
            )
            return
        if parts[0] == "torch" and len(parts) >= 2 and parts[1] == "backends" and len(parts) > 2:
            return  # reading flags is harmless; assignments are caught in visit_Assign
        if parts[0] == "torch" and len(parts) == 2 and parts[1] in GLOBAL_STATE_CALLS:
            self.flag(node, "GLOBAL_TORCH_STATE", f"calls `{path}`: {_ADVICE['GLOBAL_TORCH_STATE']}")
        elif parts[0] == "os" and len(parts) >= 2 and parts[1] not in OS_ALLOWED:
            self.flag(node, "PROCESS_OR_SYSTEM", f"uses `{path}`: {_ADVICE['PROCESS_OR_SYSTEM']}")
        elif parts[0] == "sys" and len(parts) >= 2 and parts[1] not in SYS_ALLOWED:
            self.flag(node, "PROCESS_OR_SYSTEM", f"uses `{path}`: {_ADVICE['PROCESS_OR_SYSTEM']}")
        elif parts[0] == "os" and len(parts) >= 3 and parts[1] == "environ" and parts[2] not in ("get",):
            self.flag(node, "ENV_TAMPER", f"uses `{path}`: {_ADVICE['ENV_TAMPER']}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        path = self._resolve(node)
        if path:
            self._check_path(node, path)
        elif node.attr in MODULE_ESCAPES:
            self.flag(
                node,
                "FORBIDDEN_IMPORT",
                f"reads `.{node.attr}`, which leads to a module model_new.py may not use",
            )
        if node.attr in INTROSPECTION_ATTRS:
            self.flag(node, "INTROSPECTION", f"uses `.{node.attr}`: {_ADVICE['INTROSPECTION']}")
        elif node.attr in IDENTITY_ATTRS and id(node) not in self.pointer_arguments:
            self.flag(node, "DATA_PTR_CACHE", f"uses `.{node.attr}`: {_ADVICE['DATA_PTR_CACHE']}")
        elif node.attr in TENSOR_EXITS:
            self.flag(node, "TENSOR_EXPORT", f"uses `.{node.attr}`: {_ADVICE['TENSOR_EXPORT']}")
        if not path:  # resolved chains were checked whole; keep walking the others
            self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in ("__builtins__", "__import__", "__loader__", "__spec__"):
            self.flag(node, "INTROSPECTION", f"uses `{node.id}`: {_ADVICE['INTROSPECTION']}")

    def visit_Call(self, node: ast.Call) -> None:
        fn = node.func
        for arg in list(node.args) + [k.value for k in node.keywords]:
            # `kernel(x.data_ptr(), ...)`: a pointer handed to a kernel, not a key to remember anything by
            if (
                isinstance(arg, ast.Call)
                and isinstance(arg.func, ast.Attribute)
                and arg.func.attr == "data_ptr"
                and not arg.args
            ):
                self.pointer_arguments.add(id(arg.func))
        if isinstance(fn, ast.Name):
            if fn.id in DYNAMIC:
                self.flag(node, "DYNAMIC_CODE", f"calls `{fn.id}()`: {_ADVICE['DYNAMIC_CODE']}")
            elif fn.id == "open":
                self.flag(node, "FILE_IO", f"calls `open()`: {_ADVICE['FILE_IO']}")
            elif fn.id in ("id", "hash"):
                self.flag(node, "DATA_PTR_CACHE", f"calls `{fn.id}()`: {_ADVICE['DATA_PTR_CACHE']}")
            elif fn.id in ("setattr", "delattr") and node.args:
                target = self._resolve(node.args[0])
                if target or (isinstance(node.args[0], ast.Name) and node.args[0].id in MODULE_ROOTS_PATCHABLE):
                    self.flag(
                        node,
                        "MONKEY_PATCH",
                        f"calls `{fn.id}` on `{target or node.args[0].id}`: {_ADVICE['MONKEY_PATCH']}",
                    )
            elif fn.id == "getattr" and len(node.args) >= 2:
                target = self._resolve(node.args[0])
                name = node.args[1]
                if target and isinstance(name, ast.Constant) and isinstance(name.value, str):
                    self._check_path(node, f"{target}.{name.value}")
                elif target:
                    self.flag(
                        node,
                        "DYNAMIC_CODE",
                        f"calls getattr on `{target}` with a computed name: {_ADVICE['DYNAMIC_CODE']}",
                    )
        self.generic_visit(node)

    # ----- definitions and assignments ------------------------------------------------------------------------

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            path = self._resolve(base) or (base.id if isinstance(base, ast.Name) else "")
            if path in ("torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter", "Tensor"):
                self.flag(node, "TENSOR_SUBCLASS", f"class {node.name} subclasses {path}: {_ADVICE['TENSOR_SUBCLASS']}")
            if path.split(".")[-1] == "Model" or path.startswith("model."):
                self.flag(
                    node,
                    "REFERENCE_ACCESS",
                    f"class {node.name} subclasses the reference Model; ModelNew must implement forward itself",
                )
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in (
                "__torch_function__",
                "__torch_dispatch__",
            ):
                self.flag(item, "TENSOR_SUBCLASS", f"defines {item.name}: {_ADVICE['TENSOR_SUBCLASS']}")
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in ("__del__",):
                self.flag(item, "INTROSPECTION", f"defines {item.name}: finalizers run outside evaluation")
        self.generic_visit(node)

    def visit_Try(self, node: ast.AST) -> None:
        self.flag(node, "TRY_EXCEPT", _ADVICE["TRY_EXCEPT"])
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            path = self._resolve(
                item.context_expr.func if isinstance(item.context_expr, ast.Call) else item.context_expr
            )
            if path and path.startswith("contextlib"):
                self.flag(node, "TRY_EXCEPT", _ADVICE["TRY_EXCEPT"])
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def _check_target(self, target: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t)
            return
        if isinstance(target, ast.Subscript):
            base = self._resolve(target.value)
            if base == "os.environ":
                key = target.slice.value if isinstance(target.slice, ast.Constant) else None
                if key not in ENV_WRITABLE:
                    self.flag(target, "ENV_TAMPER", f"sets os.environ[{key!r}]: {_ADVICE['ENV_TAMPER']}")
            return
        if isinstance(target, ast.Attribute):
            base = self._resolve(target.value)
            if base and base.split(".")[0] in MODULE_ROOTS_PATCHABLE:
                code = "GLOBAL_TORCH_STATE" if base.startswith("torch.backends") else "MONKEY_PATCH"
                self.flag(target, code, f"assigns `{base}.{target.attr}`: {_ADVICE[code]}")


_ADVICE = {
    "TORCH_COMPILE": "compilers and tracers are not allowed; write the kernels yourself",
    "PRIVATE_TORCH_API": "private and dispatcher-level torch APIs are not allowed; call your extension's functions",
    "TENSOR_SUBCLASS": "tensor subclasses and torch function/dispatch overrides are not allowed; return plain tensors",
    "STREAM_USE": "launch every kernel on the caller's current stream (c10::cuda::getCurrentCUDAStream())",
    "CUDA_GRAPH": "Python-level CUDA graphs are not allowed; launch your kernels directly",
    "RNG_MANIPULATION": "do not seed or read the random generators; the evaluator draws its own secret seeds",
    "FILE_IO": "files may not be read or written; everything must be computed from the inputs",
    "TIMING_AWARE": "the candidate may not read timers or profile itself",
    "PROCESS_OR_SYSTEM": "only os.path, os.environ.get and os.getenv are allowed",
    "ENV_TAMPER": "environment variables may not be changed (except TORCH_CUDA_ARCH_LIST and MAX_JOBS)",
    "GLOBAL_TORCH_STATE": "torch's global settings may not be changed; they would also change the baselines",
    "INTROSPECTION": "frame, globals and object-graph introspection is not allowed",
    "TENSOR_EXPORT": "tensor data may not leave torch for NumPy, DLPack or Python lists; compute in your kernels",
    "DATA_PTR_CACHE": "results may not be keyed on tensor identity or storage; compute every call from the inputs",
    "DYNAMIC_CODE": "dynamic code is not allowed; write the code in model_new.py",
    "MONKEY_PATCH": "modules' attributes may not be replaced",
    "TRY_EXCEPT": "try/except (and contextlib.suppress) is not allowed: a fallback hides a failing kernel; let "
    "errors raise",
}
