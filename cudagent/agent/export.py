"""`cudagent export`: a run's kernel as a Python package that needs nothing from cudagent.

DEST/__init__.py     builds the extension on first import (cached under DEST/_build/) and exposes ModelNew
DEST/_extension.py   the build: torch.utils.cpp_extension.load over binding.cpp and kernels/
DEST/model_new.py    ModelNew, as the agent wrote it (its `import cuda_extension` finds the built module)
DEST/model.py        the reference it was verified against
DEST/kernels/, DEST/binding.cpp, DEST/binding_registry.h

The extension is built under a name of its own (`cuda_extension_<hash of its sources>`) and answers to
`cuda_extension` only while its model_new.py is imported, so several exported packages live in one process (the
kernels of a user's model, cudagent/usermodel/package.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from cudagent.errors import CudagentError

INIT = '''"""ModelNew exported by cudagent ({origin}).

Importing this package builds its kernels once (CUDA sources when a GPU is visible, the C++ ones otherwise) and
caches the build in _build/ next to this file.
"""
'''

# The built extension answers to the name model_new.py imports while model_new.py is imported, and only then.
LOAD_EXTENSION = """
import sys

from ._extension import load as _load

_previous = sys.modules.get("cuda_extension")
sys.modules["cuda_extension"] = _load()
try:
    from . import model_new as _model_new  # noqa: F401
finally:
    if _previous is None:
        del sys.modules["cuda_extension"]
    else:
        sys.modules["cuda_extension"] = _previous
"""

EXPOSE = """
from .model_new import ModelNew  # noqa: E402

__all__ = ["ModelNew"]
"""

EXTENSION = '''"""Build the kernels of this package with torch.utils.cpp_extension (ninja, incremental, cached)."""

import hashlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load():
    import torch
    from torch.utils.cpp_extension import load as build

    cuda = torch.cuda.is_available()
    kernels = HERE / "kernels"
    suffixes = (".cpp", ".cc", ".cxx") + ((".cu",) if cuda else ())
    sources = [HERE / "binding.cpp"] + sorted(p for p in kernels.rglob("*") if p.suffix in suffixes)
    # the device's own target, as cudagent's evaluator built the kernels: on Hopper and later its `a` form (sm_90a),
    # without which warpgroup MMAs (wgmma) and setmaxnreg do not assemble
    arch = []
    if cuda:
        major, minor = torch.cuda.get_device_capability()
        if major >= 9:
            arch = [f"-gencode=arch=compute_{major}{minor}a,code=sm_{major}{minor}a"]
    digest = hashlib.sha256()
    for p in sorted(kernels.rglob("*")) + sources[:1]:
        if p.is_file():
            digest.update(p.name.encode() + p.read_bytes())
    digest.update(b"cuda" if cuda else b"cpu")
    digest.update(" ".join(arch).encode())
    build_dir = HERE / "_build" / digest.hexdigest()[:16]
    build_dir.mkdir(parents=True, exist_ok=True)
    return build(
        name="cuda_extension_" + digest.hexdigest()[:16],
        sources=[str(p) for p in sources],
        extra_include_paths=[str(HERE)],
        extra_cflags=["-O3", "-std=c++20", "-fopenmp"],
        extra_cuda_cflags=["-O3", "--use_fast_math", "-std=c++20"] + arch,
        extra_ldflags=["-fopenmp"] + (["-lcublas", "-lcublasLt"] if cuda else []),
        build_directory=str(build_dir),
        with_cuda=cuda,
        verbose=False,
    )
'''

SKIP = (".gitignore",)


def export_package(files: dict[str, bytes], dest: Path, force: bool = False, origin: str = "") -> Path:
    """Write `files` (a workspace's files by relative path) as a package at `dest`; return its path."""
    dest = dest.expanduser()
    if not dest.name.isidentifier():
        raise CudagentError(f"{dest.name!r} is not a valid Python package name; choose a name like fast_softmax")
    if dest.exists():
        if not force:
            raise CudagentError(f"{dest} already exists; choose a new directory or pass --force to replace it")
        if not (dest / "__init__.py").is_file() or not (dest / "_extension.py").is_file():
            raise CudagentError(f"{dest} exists and is not an exported package; refusing to replace it")
        shutil.rmtree(dest)
    if "model_new.py" not in files:
        raise CudagentError("that commit has no model_new.py to export")
    dest.mkdir(parents=True)
    for rel, data in files.items():
        if rel in SKIP or rel.startswith("build/"):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (dest / "kernels").mkdir(exist_ok=True)
    init = INIT.format(origin=origin or "cudagent")
    if b"cuda_extension" in files["model_new.py"]:
        init += LOAD_EXTENSION
    (dest / "__init__.py").write_text(init + EXPOSE)
    binding = dest / "binding.cpp"
    if binding.is_file():  # the module's name is the build's (see above), not the workspace's fixed one
        binding.write_text(
            binding.read_text().replace("PYBIND11_MODULE(cuda_extension,", "PYBIND11_MODULE(TORCH_EXTENSION_NAME,")
        )
    (dest / "_extension.py").write_text(EXTENSION)
    return dest.resolve()
