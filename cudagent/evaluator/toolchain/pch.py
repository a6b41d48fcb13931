"""Precompiled headers for the torch-including C++ units of workspace builds (objcache.py asks on a miss).

A kernel's `*_binding.cpp` starts by including a torch header (torch/types.h, torch/extension.h) and spends about
half of its compile (16 s on the H100 host) reading it. GCC's own mechanism takes that half away: a directory
searched before torch's holds `X.gch` for the unit's first header X, and GCC uses it only when the unit reaches
that include in the state the PCH was made in (macros, options); otherwise, and for every later `#include <X>`, it
reads the `X` beside it, which includes the real header (`#include_next`).

When one is made: the first miss of a (compiler, flags, header) on a machine compiles as usual and is counted; the
second makes the PCH (about 450 MB and 24 s for torch/types.h on two cores; other units that want it wait for it),
so a header used once never costs that. After that every unit that starts with X and misses the object cache
compiles with it (8 s instead of 17 s for axpby's unit on two cores; the object is byte for byte the same).

What keeps it exact, beside GCC's own check:
- the PCH is made from a stub `#include <X>` with the unit's flags less its `-I` folders (the workspace), so it
  holds only what the system include folders give, and one workspace's files never reach another's build;
- a unit uses it only where none of its `-I` folders has a file standing in front of one the PCH read, under
  any of the compiler's search folders (a workspace's own `c10/...` or `vector` is read, not torch's or the
  standard library's), and only while every file it read still has its size
  and modification time (torch upgraded in place: the PCH is made again).
CUDAGENT_BUILD_CACHE=0 turns it off with the object cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

# Only headers heavy enough to be worth hundreds of megabytes: torch's, and pybind11 (which torch's include).
HEAVY_PREFIXES = ("torch/", "ATen/", "c10/", "pybind11/")
MISSES_BEFORE_PCH = 2
# The headers a workspace's kernels start with (the examples, the skills, KernelBench's sources)
WORKSPACE_HEADERS = ("torch/types.h", "torch/extension.h")
_INCLUDE = re.compile(r"#\s*include\s*<([^>\s]+)>\s*$")


def leading_system_include(text: str) -> str | None:
    """X when the unit's first preprocessing directive is `#include <X>` of a heavy header; else None."""
    in_comment = False
    for raw in text.splitlines():
        line = raw.strip()
        if in_comment:
            if "*/" not in line:
                continue
            line, in_comment = line.split("*/", 1)[1].strip(), False
        while line.startswith("/*"):
            if "*/" not in line:
                in_comment, line = True, ""
                break
            line = line.split("*/", 1)[1].strip()
        if not line or line.startswith("//"):
            continue
        match = _INCLUDE.match(line.split("//", 1)[0].strip())
        header = match.group(1) if match else None
        return header if header and header.startswith(HEAVY_PREFIXES) else None
    return None


def _split(argv: list[str]) -> tuple[str, list[str], list[str], str] | None:
    """(compiler, flags for the PCH, the unit's -I folders, source) of `CXX ... -c SRC -o OUT`; None otherwise."""
    if "-c" not in argv or argv.index("-c") + 1 >= len(argv):
        return None
    source = argv[argv.index("-c") + 1]
    flags, local, skip = [], [], 0
    args = argv[1:]
    for i, arg in enumerate(args):
        if skip:
            skip -= 1
            continue
        if arg in ("-o", "-MF"):
            skip = 1
        elif arg == "-c":
            skip = 1  # and the source after it
        elif arg == "-I" and i + 1 < len(args):
            local.append(args[i + 1])
            skip = 1
        elif arg.startswith("-I"):
            local.append(arg[2:])
        elif arg != "-MMD" and not arg.startswith("-DTORCH_EXTENSION_NAME="):
            flags.append(arg)  # the module's name: no header reads it, and every load_inline module has its own
    return argv[0], flags, local, source


def _search_dirs(compiler: str, flags: list[str]) -> list[str]:
    """Every folder the compiler searches for `#include <...>` with these flags (the -isystem ones and its own),
    as it prints them with -v."""
    proc = subprocess.run(
        [compiler, *flags, "-E", "-x", "c++", "-", "-v", "-o", os.devnull], input="", capture_output=True, text=True
    )
    lines = proc.stderr.splitlines()
    try:
        first = lines.index("#include <...> search starts here:") + 1
        last = lines.index("End of search list.")
    except ValueError:
        return []
    return [os.path.realpath(ln.strip()) for ln in lines[first:last]]


class PchStore:
    """The PCHs of a machine, under `root/pch/<key>/` (key: compiler identity, flags and header)."""

    def __init__(self, root: Path, compiler_identity: list):
        self.root, self.identity = Path(root) / "pch", compiler_identity

    def arguments_for(self, argv: list[str], cwd: Path | None = None, at_once: bool = False) -> list[str]:
        """`argv` with the PCH's folder searched first, when one applies (made now if this is its second miss, or
        its first `at_once`: `prepare`'s); `argv` unchanged otherwise. `cwd`: the folder the command runs in (default:
        this process's)."""
        split = _split(argv)
        if split is None:
            return argv
        compiler, flags, local, source = split
        try:
            header = leading_system_include((Path(cwd or ".") / source).read_text(errors="replace"))
        except OSError:
            return argv
        if header is None:
            return argv
        entry = self.root / hashlib.sha256(json.dumps([self.identity, flags, header]).encode()).hexdigest()[:32]
        try:
            manifest = self._ready(entry, compiler, flags, header, at_once)
        except OSError:  # a cache that cannot be written or read: compile without
            return argv
        if manifest is None or self._shadowed(manifest, [os.path.join(cwd or ".", d) for d in local]):
            return argv
        return [compiler, "-isystem", str(entry / "include"), *argv[1:]]

    def _ready(self, entry: Path, compiler: str, flags: list[str], header: str, at_once: bool) -> dict | None:
        """The entry's manifest when its PCH is there and current; made here on the second miss (`at_once`: first)."""
        manifest = _current(entry)
        if manifest is not None:
            os.utime(entry)  # recently used (objcache.trim)
            return manifest
        if (entry / "failed").exists():
            return None
        entry.mkdir(parents=True, exist_ok=True)
        with open(entry / "misses", "a") as f:
            f.write("1\n")
        needed = 1 if at_once else MISSES_BEFORE_PCH
        if (entry / "misses").read_text().count("\n") < needed:
            return None
        with open(entry.parent / f"{entry.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process makes it; the others wait for it and use it
            return _current(entry) or _make(entry, compiler, flags, header)

    @staticmethod
    def _shadowed(manifest: dict, local: list[str]) -> bool:
        """Whether one of the unit's -I folders has a file that it would read instead of one the PCH holds."""
        systems = manifest["system_dirs"]
        for folder in local:
            for path, _size, _mtime in manifest["deps"]:
                under = [s for s in systems if path.startswith(s + os.sep)]
                if not under:  # reached some other way: no telling what a workspace file could stand in for
                    return True
                # any name it was included by: the path under each search folder it lies in
                if any(os.path.lexists(os.path.join(folder, os.path.relpath(path, s))) for s in under):
                    return True
        return False


def prepare(device) -> str:
    """Make now the PCHs of the headers a workspace's kernels start with, for the workspace build's own flags (a
    workspace of one unit per header), and of torch/extension.h for the main.cpp a KernelBench candidate's
    load_inline call writes with torch's flags and no extra ones (one such call). The builds are written as usual and
    only their PCHs made (`pch_only`: the units themselves are of no use), the two builds side by side. What a
    machine's first builds would otherwise compile without (a first miss) or stop to make (a second)."""
    import secrets
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    from cudagent.evaluator.toolchain import inline
    from cudagent.evaluator.toolchain.extension import build_workspace
    from cudagent.workspace import Workspace

    token = secrets.token_hex(6)
    source = f"int cudagent_pch_inline_{token}() {{ return 0; }}"
    spec = inline.InlineSpec.of_call((f"cudagent_pch_{token}", source), {"functions": [], "with_cuda": False})
    folder = inline.folder_for(spec, device)
    try:
        with tempfile.TemporaryDirectory(prefix="cudagent-pch-") as scratch, ThreadPoolExecutor(2) as pool:
            ws = Workspace.create(Path(scratch) / "ws", "")
            for i, header in enumerate(WORKSPACE_HEADERS):
                unit = f"#include <{header}>\nint cudagent_pch_{i}_{token}() {{ return {i}; }}\n"
                (ws.kernels_dir / f"pch_{i}.cpp").write_text(unit)
            workspace = pool.submit(build_workspace, ws, device, pch_only=True)
            load_inline = pool.submit(inline.build, spec, device, timeout_s=600, pch_only=True)
            for what, built in (("workspace", workspace.result()), ("load_inline call", load_inline.result())):
                if not built.ok:
                    raise RuntimeError(f"the precompiled headers of the {what} were not made: {built.errors[:300]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the call's build folder is of no use: only its PCH stays
        folder.with_name(folder.name + ".lock").unlink(missing_ok=True)
    return ", ".join(WORKSPACE_HEADERS) + "; torch/extension.h as load_inline builds it"


def _current(entry: Path) -> dict | None:
    try:
        manifest = json.loads((entry / "manifest.json").read_text())
        include = entry / "include" / manifest["header"]
        if not (include.is_file() and include.with_name(include.name + ".gch").is_file()):
            return None
        for path, size, mtime in manifest["deps"]:
            st = os.stat(path)
            if (st.st_size, st.st_mtime_ns) != (size, mtime):
                return None
        return manifest
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _make(entry: Path, compiler: str, flags: list[str], header: str) -> dict | None:
    """Compile the stub into `include/<header>.gch` and write the manifest of what it read; None if it fails (then
    never tried again for this entry: the units compile as they would without it)."""
    stub = entry / "stub.h"
    stub.write_text(f"#include <{header}>\n")
    gch = entry / "include" / (header + ".gch")
    gch.unlink(missing_ok=True)  # a stale one goes before the new manifest is written
    gch.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".gch", dir=gch.parent)
    os.close(fd)
    deps_file = entry / "stub.d"
    proc = subprocess.run(
        [compiler, *flags, "-x", "c++-header", str(stub), "-o", tmp, "-MD", "-MF", str(deps_file)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        Path(tmp).unlink(missing_ok=True)  # g++ removes its output on an error
        (entry / "failed").write_text(proc.stderr[-4000:])
        return None
    deps = []
    for path in _make_deps(deps_file.read_text()):
        real = os.path.realpath(path)
        if real != str(stub.resolve()):
            st = os.stat(real)
            deps.append([real, st.st_size, st.st_mtime_ns])
    manifest = {"header": header, "system_dirs": _search_dirs(compiler, flags), "deps": deps}
    (entry / "manifest.json").write_text(json.dumps(manifest))
    # Where GCC finds X.gch it also looks for X: once more for any later `#include <X>` (which the PCH cannot
    # serve), and for the first one when the PCH does not fit the unit. This X hands both to the real header.
    (entry / "include" / header).write_text(
        f"// precompiled by cudagent (pch.py): the header itself\n#include_next <{header}>\n"
    )
    os.replace(tmp, gch)
    return manifest


def _make_deps(text: str) -> list[str]:
    """The prerequisites of a make rule as GCC writes it (-MD): `target: a b \\` lines; escaped spaces kept."""
    body = text.replace("\\\n", " ").split(":", 1)[1] if ":" in text else ""
    return [p.replace("\\ ", " ") for p in re.findall(r"(?:\\ |[^\s])+", body)]
