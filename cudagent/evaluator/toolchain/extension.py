"""Incremental build of a workspace's extension module `cuda_extension`.

cudagent writes its own `build.ninja`, in the workspace's build folder (Workspace.build_dir, outside the workspace),
with the flags torch.utils.cpp_extension would use, instead of
calling `cpp_extension.load`, for two reasons: `load` imports the module it builds, and the trusted process must
never load candidate code; and ninja then sees every source through the folder's `ws` link, so only changed
sources recompile, every workspace's command lines are the same (the compiler cache serves them all), and nothing
is ever wiped.

One module of about 560 lines: the ninja file, the flags torch would pass, where the build runs (its jail, its
folder) and the compiler output the agent reads are one build, read together.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.boundary.bwrap import install_prefixes
from cudagent.device.info import DeviceInfo, gencode
from cudagent.errors import EnvironmentProblem
from cudagent.evaluator.jail.compiler import build_env, jailed_build
from cudagent.evaluator.jail.level import Jail
from cudagent.evaluator.toolchain import expanded
from cudagent.evaluator.toolchain.expanded import Expansion, OwnFile
from cudagent.procs import Limits, physical_memory_bytes, run_bounded
from cudagent.resources import PACKAGE_DIR, cache_dir
from cudagent.text import counted
from cudagent.workspace import EXTENSION_NAME, Workspace

DEFAULT_BUILD_TIMEOUT_S = 600.0
# The flags torch's own extension builds pass to nvcc; kept so kernels written for the CUDA Agent environment
# (which builds through cpp_extension.load) compile the same way here.
TORCH_NVCC_FLAGS = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
)
MAX_ERROR_LINES = 60
# nvcc with two threads preprocesses for the host and for the device side by side (a few seconds on a unit that
# includes torch); cudafe++ and cicc stay one after the other (cicc reads the module id cudafe++ writes), and with
# one architecture more threads would have nothing to do (benchmarks/nvcc_threads.py).
NVCC_THREADS = ("--threads", "2")
WS_LINK = "ws"  # the workspace, seen from its build folder (a link there)
KEEP_BUILD_FOLDERS = 64  # build folders a machine keeps (workspaces' and load_inline calls'), the newest


@dataclass
class BuildResult:
    ok: bool
    seconds: float
    library: Path | None = None
    recompiled: list[str] = field(default_factory=list)
    errors: str = ""  # what the agent reads: first errors first, file:line, paths relative to the workspace
    log: str = ""  # the whole (bounded) compiler output
    timed_out: bool = False
    restored: list[str] = field(default_factory=list)  # fixed files that had been changed and were restored
    notes: list[str] = field(default_factory=list)  # how it was built, where that differs from the sources as written
    # what the preprocessor made of each unit, for the audit (audit/expanded_scan.py); not part of to_dict
    expanded: list[Expansion] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "library": str(self.library) if self.library else None,
            "recompiled": self.recompiled,
            "errors": self.errors,
            "timed_out": self.timed_out,
            "restored": self.restored,
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, d: dict) -> BuildResult:
        """The inverse of to_dict (the full log is not part of it)."""
        return cls(
            ok=bool(d["ok"]),
            seconds=float(d.get("seconds", 0.0)),
            library=Path(d["library"]) if d.get("library") else None,
            recompiled=list(d.get("recompiled", [])),
            errors=d.get("errors", ""),
            timed_out=bool(d.get("timed_out", False)),
            restored=list(d.get("restored", [])),
            notes=list(d.get("notes", [])),
        )


@dataclass(frozen=True)
class Toolchain:
    cuda: bool
    cxx: str
    nvcc: str | None
    arch: str | None
    cuda_home: str | None
    include_dirs: tuple[str, ...]
    library_dirs: tuple[str, ...]


@functools.cache
def toolchain_for(device: DeviceInfo) -> Toolchain:
    """Find the compilers and paths for this device; a missing compiler is an environment problem."""
    from torch.utils import cpp_extension

    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx or not shutil.which(cxx):
        raise EnvironmentProblem(
            f"no C++ compiler found ({cxx or 'c++ or g++ on PATH'}); install g++, or point CXX at "
            "a C++ compiler, to build kernels"
        )
    includes = list(cpp_extension.include_paths())
    libs = list(cpp_extension.library_paths())
    python_include = sysconfig.get_path("include", scheme="posix_prefix")
    if python_include:
        includes.append(python_include)
    if not device.is_cuda:
        return Toolchain(False, cxx, None, None, None, tuple(includes), tuple(libs))
    cuda_home = cpp_extension.CUDA_HOME
    nvcc = os.path.join(cuda_home, "bin", "nvcc") if cuda_home else shutil.which("nvcc")
    if not nvcc or not os.path.exists(nvcc):
        raise EnvironmentProblem(
            "nvcc was not found (set CUDA_HOME to the CUDA toolkit, or put nvcc on PATH) and CUDA kernels cannot build"
        )
    cuda_home = cuda_home or str(Path(nvcc).resolve().parent.parent)
    includes.append(os.path.join(cuda_home, "include"))
    lib64 = os.path.join(cuda_home, "lib64")
    libs.append(lib64 if os.path.isdir(lib64) else os.path.join(cuda_home, "lib"))
    return Toolchain(True, cxx, nvcc, device.arch, cuda_home, tuple(includes), tuple(libs))


@dataclass(frozen=True)
class Unit:
    source: Path
    rule: str  # "cxx" or "nvcc"


def build_workspace(
    ws: Workspace,
    device: DeviceInfo,
    timeout_s: float = DEFAULT_BUILD_TIMEOUT_S,
    jail: Jail | None = None,
    pch_only: bool = False,
) -> BuildResult:
    """Build `cuda_extension.so` in the workspace's build folder (outside the workspace: ws.build_dir) from
    binding.cpp and kernels/ (CPU mode: the .cpp sources only), in `jail` (the machine's; None: unjailed).
    `pch_only`: make only the precompiled headers its units would compile with (run_ninja)."""
    start = time.monotonic()
    restored = ws.ensure_infrastructure()
    refused = ws.unbuildable()  # only audited source text reaches the compiler (no precompiled header, no binary)
    if refused is not None:
        return BuildResult(False, time.monotonic() - start, restored=restored, errors=f"not built: {refused}")
    tc = toolchain_for(device)
    if not ws.build_dir.is_dir():
        ws.build_dir.mkdir(parents=True)
        trim_build_folders(ws.build_dir.parent)
    os.utime(ws.build_dir)  # recently used: the last to go when the folders are trimmed
    _link_workspace(ws)
    sources = ws.compiled_sources(cuda=tc.cuda)
    if not tc.cuda:  # a CUDA solution on a CPU build fails in the compiler after a minute: say so before it starts
        needs = next(((src, header) for src in sources if (header := cuda_include(src))), None)
        if needs is not None:
            src, header = needs
            return BuildResult(
                False,
                time.monotonic() - start,
                restored=restored,
                errors=f"{os.path.relpath(src, ws.root)} includes <{header}>, but this is a CPU build (--device cpu, "
                "or no GPU here): check these kernels on a GPU, or give C++ kernels for the CPU",
            )
    units = [Unit(src, "nvcc" if src.suffix == ".cu" else "cxx") for src in sources]
    if pch_only:  # binding.cpp is the same text in every workspace: the object cache serves it after its first build
        units = [u for u in units if u.source != ws.root / "binding.cpp"]
    extra_inc, extra_ld = _cudnn_flags() if (tc.cuda and "cudnn" in _libraries_used(sources)) else ([], [])
    # `ws` is the workspace seen from the build folder: kernels may include "binding_registry.h" or
    # "../binding_registry.h", and every workspace's command lines are the same (the compiler cache serves them all)
    cflags, nvcc_flags, ldflags = torch_flags(tc, EXTENSION_NAME, tc.cuda, [f"-I{WS_LINK}", *extra_inc])
    cflags += ["-O3", "-fopenmp"]
    nvcc_flags += ["-O3", "--use_fast_math", "-lineinfo", "-std=c++20", *NVCC_THREADS]
    ldflags = ["-shared", "-fopenmp", *ldflags, *extra_ld, *(f"-Wl,-rpath,{shlex.quote(d)}" for d in tc.library_dirs)]
    result = run_ninja(
        tc,
        ws.build_dir,
        units,
        (cflags, nvcc_flags, ldflags),
        f"{EXTENSION_NAME}.so",
        timeout_s,
        start,
        summarize=lambda output: summarize_compiler_output(output, ws),
        source_name=lambda src: os.path.join(WS_LINK, os.path.relpath(src, ws.root)),
        jail=jail,
        read=[str(ws.root)],
        pch_only=pch_only,
    )
    if pch_only:
        return result
    result.restored = restored
    result.recompiled = [s.removeprefix(WS_LINK + os.sep) for s in result.recompiled]
    if result.ok:
        seen_as = lambda src: os.path.join(WS_LINK, os.path.relpath(src, ws.root))  # noqa: E731
        own = {seen_as(p): OwnFile(os.path.relpath(p, ws.root)) for p in ws.kernel_sources()}
        result.expanded = expansions(ws.build_dir, units, own, source_name=seen_as)
    if not result.ok and not tc.cuda and re.search(r"cuda_runtime\.h|c10/cuda/|ATen/cuda/|cublas|cudnn\.h", result.log):
        result.errors = (
            "these kernels include CUDA headers, but this is a CPU build (--device cpu, or no GPU here): "
            "check them on a GPU, or give C++ kernels for the CPU\n" + result.errors
        )
    return result


_CUDA_HEADER = re.compile(
    r'^\s*#\s*include\s*[<"]((?:cuda|cuda_runtime|cuda_runtime_api|cuda_bf16|cuda_fp16|cuda_fp8)\.h|'
    r"(?:c10|ATen)/cuda/[^>\"]+|cublas(?:Lt|_v2)?\.h|cudnn\.h|curand[^>\"]*\.h|cusparse\.h|cufft\.h|cub/[^>\"]+)[>\"]"
)


def cuda_include(source: Path) -> str | None:
    """The first CUDA header `source` includes outside any #if (a guarded include may be meant for GPU builds only),
    or None."""
    depth = 0
    try:
        lines = source.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        stripped = line.strip()
        if re.match(r"#\s*if", stripped):
            depth += 1
        elif re.match(r"#\s*endif", stripped):
            depth = max(0, depth - 1)
        elif depth == 0:
            found = _CUDA_HEADER.match(line)
            if found:
                return found.group(1)
    return None


def torch_flags(
    tc: Toolchain, name: str, with_cuda: bool, local_includes: list[str]
) -> tuple[list[str], list[str], list[str]]:
    """(C++ flags, nvcc flags, linker flags after -shared) as torch.utils.cpp_extension gives a module `name`: the
    defines, the include folders (`local_includes` first, then torch's and Python's as system folders), position
    independence and C++20, the device's architecture, and torch's libraries."""
    import torch

    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    common = [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    common += list(local_includes) + [f"-isystem {shlex.quote(d)}" for d in tc.include_dirs]
    cflags = common + ["-fPIC", "-std=c++20"]
    nvcc_flags: list[str] = []
    ldflags = [f"-L{shlex.quote(d)}" for d in tc.library_dirs] + ["-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"]
    if with_cuda and tc.cuda:
        nvcc_flags = common + list(TORCH_NVCC_FLAGS) + [gencode(tc.arch)]
        nvcc_flags += ["--compiler-options", "'-fPIC'"]
        ldflags += ["-lc10_cuda", "-ltorch_cuda", "-lcudart", "-lcublas", "-lcublasLt"]
    return cflags, nvcc_flags, ldflags


def run_ninja(
    tc: Toolchain,
    folder: Path,
    units: list[Unit],
    flags: tuple[list[str], list[str], list[str]],
    target: str,
    timeout_s: float,
    start: float,
    summarize=None,
    source_name=None,
    jail: Jail | None = None,
    read: list[str] | None = None,
    pch_only: bool = False,
) -> BuildResult:
    """Write `folder/build.ninja` (C++ units through the machine's object cache) for `target` from `units` with
    `flags` (C++, nvcc, linker), and build it in `jail` (jail/compiler.py: the compilers read the toolchain and
    `read`, and write `folder` and the compiler cache); `start` is when the build began (by time.monotonic).
    source_name: how build.ninja names a unit's source (relative to `folder`). `pch_only`: instead of building, make
    the precompiled headers its C++ units would compile with (objcache.make_pch), from the commands ninja reads in
    that file, here (trusted sources only: `doctor --prepare`'s)."""
    source_name = source_name or (lambda src: os.path.relpath(src, folder))
    object_name = lambda src: source_name(src).removeprefix(WS_LINK + os.sep)  # noqa: E731
    _write_if_changed(folder / "build.ninja", _ninja_text(tc, units, flags, target, source_name, object_name))
    ninja = _ninja_binary()
    if pch_only:
        return _make_pchs(ninja, folder, target, start)
    scratch = folder / ".tmp"
    scratch.mkdir(exist_ok=True)
    caches = [cache_dir() / "objects", cache_dir() / "manifests", cache_dir() / "pch"]
    for c in caches:
        c.mkdir(parents=True, exist_ok=True)
    # The compile rule runs `python -m cudagent.evaluator.toolchain.objcache`: this cudagent, wherever it was imported
    # from, with the cache this process uses
    env = build_env(
        {"NINJA_STATUS": "[%f/%t] ", "PYTHONPATH": str(PACKAGE_DIR.parent), "CUDAGENT_CACHE_DIR": str(cache_dir())},
        str(scratch),
    )
    edges = len(units) + sum(unit.rule == "nvcc" for unit in units)  # a CUDA unit's preprocessing runs beside it
    jobs = str(max(1, min(edges, os.cpu_count() or 1)))
    writable = [str(folder), *(str(c) for c in caches)]
    reads = [*toolchain_paths(tc), *(read or [])]
    command = jailed_build([ninja, "-C", str(folder), "-j", jobs], jail, reads, writable, str(folder))
    proc = run_bounded(
        command,
        env=env,
        cwd=str(folder),
        timeout_s=timeout_s,
        limits=Limits(memory_bytes=physical_memory_bytes() // 2),
    )
    seconds = time.monotonic() - start
    output = proc.output
    recompiled = re.findall(r"^\[\d+/\d+\] (?:CXX|NVCC) (\S+)", output, flags=re.M)
    library = folder / target
    if proc.timed_out:
        why = f"the build ran past its {timeout_s:.0f} s limit and was stopped"
        return BuildResult(False, seconds, None, recompiled, why, output, timed_out=True)
    if proc.killed_for:
        return BuildResult(False, seconds, None, recompiled, f"the compiler {proc.limit_message}", output)
    if proc.returncode != 0 or not library.is_file():
        errors = summarize(output) if summarize else output[-8000:]
        return BuildResult(False, seconds, None, recompiled, errors, output)
    return BuildResult(True, seconds, library, recompiled, "", output)


def _make_pchs(ninja: str, folder: Path, target: str, start: float) -> BuildResult:
    """The precompiled headers of `folder/build.ninja`'s C++ units made, side by side (run_ninja's `pch_only`): each
    compile command ninja would run, with objcache's `--pch-only`."""
    from concurrent.futures import ThreadPoolExecutor

    listed = subprocess.run([ninja, "-C", str(folder), "-t", "commands", target], capture_output=True, text=True)
    if listed.returncode != 0:
        return BuildResult(False, time.monotonic() - start, errors=listed.stdout + listed.stderr)
    marker = "cudagent.evaluator.toolchain.objcache"
    units = [argv for argv in map(shlex.split, listed.stdout.splitlines()) if marker in argv]
    only = [[*argv[: argv.index(marker) + 1], "--pch-only", *argv[argv.index(marker) + 1 :]] for argv in units]
    with ThreadPoolExecutor(max(1, len(only))) as pool:
        runs = list(pool.map(lambda argv: subprocess.run(argv, cwd=folder, capture_output=True, text=True), only))
    failed = [
        f"{argv[argv.index('-c') + 1]}: {run.stderr.strip()[-300:]}" for argv, run in zip(units, runs) if run.returncode
    ]
    return BuildResult(not failed, time.monotonic() - start, errors="; ".join(failed))


@functools.cache
def toolchain_paths(tc: Toolchain) -> tuple[str, ...]:
    """Where the build's programs live when that is not the system's /usr (a compiler installed under /opt, say):
    each compiler's installation (the folder above its bin/), CUDA and ninja, for the build's jail to show."""
    found = install_prefixes([tc.cxx, tc.nvcc, _ninja_binary(), "gcc", "g++", "cc", "c++"])
    if tc.cuda_home and tc.cuda_home not in found:
        found.append(tc.cuda_home)
    return tuple(found)


def _ninja_binary() -> str:
    found = shutil.which("ninja")
    if found:
        return found
    try:
        import ninja  # the PyPI package ships the binary

        return os.path.join(ninja.BIN_DIR, "ninja")
    except ImportError as exc:
        raise EnvironmentProblem("ninja was not found; install it with `pip install ninja`") from exc


def _ninja_text(tc: Toolchain, units: list[Unit], flags: tuple, target: str, source_name, object_name) -> str:
    cflags, nvcc_flags, ldflags = flags
    lines = [
        "ninja_required_version = 1.3",
        f"cxx = {shlex.quote(tc.cxx)}",
        # C++ units through the machine's compiler cache (objcache.py): same preprocessed unit, same object
        f"objcache = {shlex.quote(sys.executable)} -m cudagent.evaluator.toolchain.objcache",
        f"cflags = {' '.join(cflags)}",
        "rule cxx",
        "  command = $objcache $cxx -MMD -MF $out.d $cflags -c $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = CXX $in",
    ]
    if tc.cuda:
        lines += [
            f"nvcc = {shlex.quote(tc.nvcc)}",
            f"nvcc_flags = {' '.join(nvcc_flags)}",
            "rule nvcc",
            "  command = $nvcc --generate-dependencies-with-compile --dependency-output $out.d $nvcc_flags "
            "-c $in -o $out",
            "  depfile = $out.d",
            "  deps = gcc",
            "  description = NVCC $in",
            # what the audit reads of a CUDA unit (build/expanded.py): nvcc's preprocessor, beside the compile
            f"expand = {shlex.quote(sys.executable)} -m cudagent.evaluator.toolchain.expanded",
            "rule nvcc_expand",
            "  command = $expand $nvcc $nvcc_flags -E $in -o $out",
            "  description = EXPAND $in",
        ]
    lines += [
        f"ldflags = {' '.join(ldflags)}",
        "rule link",
        "  command = $cxx $in $ldflags -o $out",
        "  description = LINK $out",
    ]
    objects, expansions = [], []
    for unit in units:
        rel = source_name(unit.source)
        obj = object_path(unit, object_name)
        objects.append(obj)
        expansions.append(obj + expanded.SUFFIX)
        if unit.rule == "nvcc":  # after the object: a header that changes rebuilds the object, then this
            lines.append(f"build {obj}: {unit.rule} {_ninja_escape(rel)}")
            lines.append(f"build {obj}{expanded.SUFFIX}: nvcc_expand {_ninja_escape(rel)} | {obj}")
        else:  # the compiler cache step writes it beside the object: an output of the same edge
            lines.append(f"build {obj} | {obj}{expanded.SUFFIX}: {unit.rule} {_ninja_escape(rel)}")
    lines.append(f"build {target}: link {' '.join(objects)} | {' '.join(expansions)}")
    lines.append(f"default {target}")
    return "\n".join(lines) + "\n"


def expansions(folder: Path, units: list[Unit], own: dict[str, OwnFile], source_name) -> list[Expansion]:
    """The preprocessed text of every unit the build made (build/expanded.py), with the candidate's files in it."""
    object_name = lambda src: source_name(src).removeprefix(WS_LINK + os.sep)  # noqa: E731
    return [
        Expansion(
            str(folder / (object_path(unit, object_name) + expanded.SUFFIX)),
            unit.rule,
            own,
            unit=os.path.normpath(source_name(unit.source)),
        )
        for unit in units
    ]


def object_path(unit: Unit, object_name) -> str:
    """Where build.ninja puts a unit's object, relative to the build folder (its preprocessed text beside it)."""
    return "obj/" + object_name(unit.source).replace(os.sep, "__") + ".o"


def _ninja_escape(path: str) -> str:
    return path.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _libraries_used(sources: list[Path]) -> set[str]:
    used = set()
    for src in sources:
        try:
            text = src.read_text(errors="replace")
        except OSError:
            continue
        if "cudnn" in text:
            used.add("cudnn")
    return used


@functools.cache
def _cudnn_flags() -> tuple[list[str], list[str]]:
    """cuDNN ships with torch's CUDA wheels (nvidia/cudnn) or with the toolkit; find its header and library."""
    roots = [os.path.join(p, "nvidia", "cudnn") for p in sys.path if p and os.path.isdir(os.path.join(p, "nvidia"))]
    roots += ["/usr/local/cuda", "/usr"]
    for root in roots:
        header = glob.glob(os.path.join(root, "include", "cudnn.h")) or glob.glob(
            os.path.join(root, "include", "*", "cudnn.h")
        )
        libs = sorted(
            glob.glob(os.path.join(root, "lib*", "libcudnn.so*"))
            + glob.glob(os.path.join(root, "lib", "*", "libcudnn.so*"))
        )
        if header and libs:
            lib = libs[0]
            return (
                [f"-isystem {shlex.quote(os.path.dirname(header[0]))}"],
                [
                    f"-L{shlex.quote(os.path.dirname(lib))}",
                    f"-l:{os.path.basename(lib)}",
                    f"-Wl,-rpath,{shlex.quote(os.path.dirname(lib))}",
                ],
            )
    return [], ["-lcudnn"]


def _write_if_changed(path: Path, text: str) -> None:
    if path.is_file() and path.read_text() == text:
        return
    path.write_text(text)


# ----- compiler output for the agent ----------------------------------------------------------------------------

_GCC_DIAG = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)? (?P<kind>fatal error|error|warning|note): ")
_NVCC_DIAG = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<kind>error|warning|catastrophic error)")
_LINK_DIAG = re.compile(r"(undefined reference to|multiple definition of|cannot find -l|ld returned)")


def summarize_compiler_output(output: str, ws: Workspace) -> str:
    """Cut a compiler log to what matters: the errors, first ones first, as `file:line`, relative to the workspace.

    Each error keeps the few lines under it (gcc's source excerpt and caret); warnings and notes are dropped
    unless nothing else explains the failure; ninja's echo of compiler command lines is dropped.
    """
    return summarize_output(output, [str(ws.root) + os.sep, WS_LINK + os.sep])


def trim_build_folders(parent: Path, keep: int = KEEP_BUILD_FOLDERS) -> list[Path]:
    """Remove the least recently used build folders under `parent` beyond the `keep` newest (a workspace whose
    folder went builds it again, from the compiler cache); the folders removed."""
    folders = sorted((p for p in parent.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in folders[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return folders[keep:]


def _link_workspace(ws: Workspace) -> None:
    """The build folder's `ws`: a link to the workspace, made by this process in a folder only it writes."""
    link = ws.build_dir / WS_LINK
    if os.path.islink(link) and os.readlink(link) == str(ws.root):
        return
    if os.path.lexists(link):
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        else:
            link.unlink()
    os.symlink(ws.root, link)


def summarize_output(output: str, root_prefixes: list[str]) -> str:
    """summarize_compiler_output with paths relative to whichever of `root_prefixes` they start with."""
    picked: list[str] = []
    lines = output.splitlines()
    i = 0
    while i < len(lines) and len(picked) < MAX_ERROR_LINES:
        line = lines[i]
        m = _GCC_DIAG.match(line) or _NVCC_DIAG.match(line)
        if (m and "error" in m.group("kind")) or _LINK_DIAG.search(line):
            picked.append(_strip_prefixes(line, root_prefixes))
            j = i + 1
            while j < len(lines) and j <= i + 3 and not (_GCC_DIAG.match(lines[j]) or _NVCC_DIAG.match(lines[j])):
                if lines[j].startswith(("FAILED:", "ninja:", "[")):
                    break
                picked.append(_strip_prefixes(lines[j], root_prefixes))
                j += 1
            i = j
            continue
        i += 1
    if not picked:
        tail = [ln for ln in lines if not ln.startswith(("[", "FAILED:"))][-30:]
        picked = [_strip_prefixes(ln, root_prefixes) for ln in tail]
    text = "\n".join(picked)
    n_errors = sum(1 for ln in lines if (_GCC_DIAG.match(ln) or _NVCC_DIAG.match(ln)) and "error" in ln)
    if n_errors > 0:
        text = f"{counted(n_errors, 'compiler error')}; the first ones:\n" + text
    return text[:8000]


def _strip_prefixes(line: str, prefixes: list[str]) -> str:
    for p in prefixes:
        line = line.replace(p, "")
    return line
