"""The agent's workspace, laid out like the released CUDA Agent `agent_workdir`.

    model.py              the reference (pristine copy of the task, read-only, hashed)
    model_new.py          the candidate: class ModelNew, importing the extension module `cuda_extension`
    kernels/              the candidate's sources: *.cu kernels, *_binding.cpp wrappers, *.cpp (cuBLAS/cuDNN, CPU)
    binding.cpp           fixed infrastructure: defines the module `cuda_extension`
    binding_registry.h    fixed infrastructure: REGISTER_BINDING(name, fn) with fn(pybind11::module&)

The build's products live outside the workspace (Workspace.build_dir, in the machine's cache): never wiped, built
incrementally, and out of reach of whatever writes the workspace.

The fixed files are checked against their hashes and restored before every build and evaluation, so nothing a
candidate does to them survives. KernelBench's single-file candidates (a model_new.py that builds its own
extension with `load_inline`) are accepted too: they have no kernels/ and build when imported.
"""

from __future__ import annotations

import ast
import hashlib
import os
import stat
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePosixPath

from cudagent.boundary.paths import Beneath
from cudagent.errors import CandidateError
from cudagent.resources import cache_dir, infra_dir
from cudagent.syntax import parse

MODEL = "model.py"
MODEL_NEW = "model_new.py"
KERNELS = "kernels"
BUILD = "build"
EXTENSION_NAME = "cuda_extension"
INFRA_FILES = ("binding.cpp", "binding_registry.h")
# Files under kernels/ that are sources: compiled (.cu/.cpp/.cc) or included (headers).
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp", ".inl")
COMPILED_CUDA = (".cu",)
COMPILED_CXX = (".cpp", ".cc", ".cxx")
# Names a compiler reads in place of a header it was asked for: GCC takes `x.h.gch` (a file, or any file in a folder
# of that name) before `x.h`, and a precompiled header is binary, so no audit of the sources ever sees it.
PRECOMPILED_SUFFIXES = (".gch", ".pch", ".pcm")


def source_problem(rel: str, data: bytes | None = None) -> str | None:
    """Why a file under kernels/ may not reach the build (None: it may): only source text of the known kinds, under
    folders that are not named like a source or a precompiled header, and never binary content under a source's name.

    >>> print(source_problem("kernels/helpers.h.gch/pch.h"))  # doctest: +ELLIPSIS
    kernels/helpers.h.gch/pch.h: a folder named 'helpers.h.gch' is a precompiled header's (...audited helpers.h)
    >>> source_problem("kernels/k.cu", b"\\x00gpch")
    'kernels/k.cu is not text (it holds NUL bytes): only source text reaches the build'
    """
    parts = PurePosixPath(rel).parts
    for folder in parts[1:-1]:
        suffix = PurePosixPath(folder).suffix
        if suffix in PRECOMPILED_SUFFIXES:
            header = folder[: -len(suffix)]
            return (
                f"{rel}: a folder named {folder!r} is a precompiled header's (the compiler would read it instead of "
                f"the audited {header})"
            )
        if suffix in SOURCE_SUFFIXES:
            return f"{rel}: a folder named {folder!r} looks like a source file; name folders without a source suffix"
    if any(PurePosixPath(p).suffix in PRECOMPILED_SUFFIXES for p in parts):
        return f"{rel} is a precompiled header; only source text reaches the build"
    if data is not None and b"\0" in data:
        return f"{rel} is not text (it holds NUL bytes): only source text reaches the build"
    return None


def infrastructure() -> dict[str, str]:
    """The fixed files every workspace carries, by name."""
    return {name: (infra_dir() / name).read_text() for name in INFRA_FILES}


class CandidateFormat(str, Enum):
    WORKSPACE = "workspace"  # model_new.py imports cuda_extension, built from kernels/
    INLINE = "inline"  # KernelBench single file: builds its own extension with load_inline / load
    PYTHON = "python"  # no extension at all


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def model_py(self) -> Path:
        return self.root / MODEL

    @property
    def model_new_py(self) -> Path:
        return self.root / MODEL_NEW

    @property
    def kernels_dir(self) -> Path:
        return self.root / KERNELS

    @property
    def build_dir(self) -> Path:
        """Where the trusted build keeps this workspace's objects and library: in the machine's cache, outside the
        workspace, so that nothing written in the workspace (a link where a folder was) can steer the build's
        writes, and the candidate's process, which never sees it, gets its library handed in (jail/cell.py)."""
        key = hashlib.sha256(str(self.root).encode()).hexdigest()[:16]
        return cache_dir() / "builds" / f"{self.root.name}-{key}"

    # ----- creation and protection -------------------------------------------------------------------------

    @classmethod
    def create(cls, root: Path, task_source: str) -> Workspace:
        root.mkdir(parents=True, exist_ok=True)
        ws = cls(root.resolve())
        ws.kernels_dir.mkdir(exist_ok=True)
        ws.ensure_infrastructure(task_source)
        return ws

    def ensure_infrastructure(self, task_source: str | None = None) -> list[str]:
        """Restore every fixed file (and model.py, given the task) that is missing or differs; return their names.
        A workspace being created calls this too; its files are all "restored" then."""
        wanted = dict(infrastructure())
        if task_source is not None:
            wanted[MODEL] = task_source
        restored = []
        tree = Beneath(self.root)
        for name, text in wanted.items():
            if _read(self.root / name) == text:
                continue
            _make_writable(self.root / name)
            tree.remove(PurePosixPath(name))
            restored.append(name)
            tree.write_bytes(PurePosixPath(name), text.encode(), 0o444 if name == MODEL else 0o644)
        return restored

    def tampered_infrastructure(self, task_source: str | None = None) -> list[str]:
        """Names of fixed files that differ from their pristine text, without touching them."""
        wanted = dict(infrastructure())
        if task_source is not None:
            wanted[MODEL] = task_source
        return [n for n, t in wanted.items() if _read(self.root / n) != t]

    # ----- what the candidate is -----------------------------------------------------------------------------

    def candidate_format(self) -> CandidateFormat:
        try:
            tree = parse(self.model_new_py.read_text())
        except (OSError, SyntaxError, ValueError):
            return CandidateFormat.WORKSPACE  # the audit reports the syntax error with its line
        imported: set[str] = set()
        called: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
                imported.update(a.name for a in node.names)
            elif isinstance(node, ast.Call):
                fn = node.func
                called.add(fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", ""))
        if EXTENSION_NAME in imported:
            return CandidateFormat.WORKSPACE
        if called & {"load_inline", "load"} or imported & {"load_inline"}:
            return CandidateFormat.INLINE
        return CandidateFormat.PYTHON

    def kernel_sources(self) -> list[Path]:
        """Every source file under kernels/ (compiled and included), sorted; found without following a link (a
        kernels/ that is a link to another folder holds nothing)."""
        files = Beneath(self.root).files(KERNELS, skip=lambda rel, is_dir: is_dir and rel.name == BUILD)
        return [self.root / rel for rel, _mode in files if rel.suffix in SOURCE_SUFFIXES]

    def unbuildable(self) -> str | None:
        """Why the kernels/ folder may not be built as it is (source_problem of anything in it, a link or another
        kind of file where a compiler looks); None when it may. Walked here, whatever wrote it (a user's own
        workspace built in place too)."""
        tree = Beneath(self.root)
        if tree.kind(PurePosixPath(KERNELS)) == "link":
            return f"{KERNELS}/ is a symbolic link; the build reads only a folder of the workspace"
        for rel, _mode in tree.files(KERNELS, skip=lambda rel, is_dir: is_dir and rel.name == BUILD):
            data = tree.read_bytes(rel) if rel.suffix in SOURCE_SUFFIXES else None
            problem = source_problem(rel.as_posix(), data)
            if problem is not None:
                return problem
        for folder in tree.folders(KERNELS):
            problem = source_problem(f"{folder.as_posix()}/x")
            if problem is not None:
                return problem.replace("/x:", ":", 1)
        return None

    def read_owned(self, path: Path) -> bytes:
        """The bytes of one of the workspace's files, read without following a link (boundary/paths.py)."""
        tree = Beneath(self.root)
        return tree.read_bytes(tree.relative(path.relative_to(self.root).as_posix()))

    def compiled_sources(self, cuda: bool) -> list[Path]:
        """What the extension is built from: binding.cpp plus the kernels' .cpp files, and their .cu files on CUDA."""
        suffixes = COMPILED_CXX + (COMPILED_CUDA if cuda else ())
        return [self.root / "binding.cpp"] + [p for p in self.kernel_sources() if p.suffix in suffixes]


def _read(path: Path) -> str | None:
    """A fixed file's text, or None where it is missing, not a regular file (a link is not followed), or not text."""
    tree = Beneath(path.parent)
    try:
        return tree.read_bytes(PurePosixPath(path.name)).decode()
    except (OSError, ValueError):
        return None


def _make_writable(path: Path) -> None:
    """A read-only file the model made read-only (or model.py) made removable by its owner."""
    try:
        if path.is_file() and not path.is_symlink():
            path.chmod(stat.S_IWUSR | stat.S_IRUSR)
    except OSError:
        pass


# ----- candidates given on the command line -------------------------------------------------------------------


@dataclass(frozen=True)
class CandidatePath:
    """What the user pointed at: a workspace directory, a directory with model_new.py, or a model_new.py file."""

    model_new: Path
    kernels: Path | None
    is_workspace: bool  # a full workspace (fixed files present) is built in place

    @property
    def root(self) -> Path:
        return self.model_new.parent


def resolve_candidate(path: Path) -> CandidatePath:
    path = path.expanduser()
    if not path.exists():
        raise CandidateError(
            f"the candidate {path} does not exist; give a workspace directory holding model_new.py, or a "
            "model_new.py file"
        )
    if path.is_dir():
        model_new = path / MODEL_NEW
        if not model_new.is_file():
            raise CandidateError(
                f"{path} has no {MODEL_NEW}; a candidate directory must hold {MODEL_NEW} (and kernels/)"
            )
        kernels = path / KERNELS
        is_ws = all((path / n).is_file() for n in INFRA_FILES)
        return CandidatePath(model_new.resolve(), kernels.resolve() if kernels.is_dir() else None, is_ws)
    if path.suffix != ".py":
        raise CandidateError(f"the candidate {path} is not a Python file; give model_new.py or its directory")
    kernels = path.parent / KERNELS
    use_kernels = path.name == MODEL_NEW and kernels.is_dir()
    return CandidatePath(path.resolve(), kernels.resolve() if use_kernels else None, False)


def workspace_for(candidate: CandidatePath, task_source: str) -> Workspace:
    """The workspace a candidate is built and evaluated in.

    A full workspace is used in place. Anything else is mirrored into a staging workspace in the cache, keyed by
    the candidate's path and the task, so that repeated checks rebuild incrementally and the user's directory gets
    no build files, and checks of one candidate against two tasks at once never write each other's task file. Only
    changed files are rewritten, so ninja sees true modification times.
    """
    if candidate.is_workspace:
        ws = Workspace(candidate.root)
        ws.ensure_infrastructure(task_source)
        return ws
    key = hashlib.sha256(f"{candidate.model_new}\0{task_source}".encode()).hexdigest()[:16]
    ws = Workspace.create(cache_dir() / "staging" / f"{candidate.root.name}-{key}", task_source)
    _sync_file(candidate.model_new, ws.model_new_py)
    wanted: set[Path] = set()
    if candidate.kernels is not None:
        for src in sorted(candidate.kernels.rglob("*")):
            if src.is_file() and src.suffix in SOURCE_SUFFIXES:
                dst = ws.kernels_dir / src.relative_to(candidate.kernels)
                wanted.add(dst)
                _sync_file(src, dst)
    for stale in ws.kernel_sources():
        if stale not in wanted:
            stale.unlink()
    return ws


def _sync_file(src: Path, dst: Path) -> None:
    data = src.read_bytes()
    if dst.is_file() and dst.read_bytes() == data:
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dst)
