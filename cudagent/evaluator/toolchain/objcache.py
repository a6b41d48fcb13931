"""A compiler cache for the C++ units of workspace builds, shared by every workspace and episode of a machine.

    python -m cudagent.evaluator.toolchain.objcache CXX -MMD -MF OUT.d FLAGS... -c SRC -o OUT  (build.ninja runs it)
    python -m cudagent.evaluator.toolchain.objcache --pch-only CXX ...   (only the PCH a miss would compile with)

An object is reused only for the same translation unit: the key is the compiler (its path, size and modification
time), the whole command line (in build.ninja every workspace path is relative, so two workspaces give the same
one) and the source as the preprocessor leaves it (every header expanded, comments gone, macros resolved). A unit
that preprocesses differently, by one token, is compiled. The first units of a fresh workspace (binding.cpp, the
kernels' `*_binding.cpp`, which include torch and took 16 s cold on the H100 host) are then a copy when another
workspace compiled the same text before.

On a miss, a unit whose first line includes a torch header compiles with a precompiled header of it (pch.py) from
the second such miss on. Only g++-style units go through it (not nvcc: its device pass sees code the host
preprocessor drops). Preprocessing costs a second or two for a unit that includes torch; on a miss that comes on
top of the compile. A unit built before with the same source and the same files read is found without it
(manifest.py: its direct key, checked against the files the last preprocessing named). The preprocessed text is
also what the audit reads of the unit: its own part is written beside the object (expanded.py), and kept with the
entry for direct hits. Entries live under the cache directory (`objects/`, `manifests/`), like the baseline
timings: as trusted as the user account they belong to.
CUDAGENT_BUILD_CACHE=0 compiles every unit. The cache keeps to CUDAGENT_BUILD_CACHE_MAX_GB (default 8): now and
then a store removes the least recently used entries.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cudagent.evaluator.toolchain import expanded
from cudagent.evaluator.toolchain.manifest import DirectLookup
from cudagent.evaluator.toolchain.pch import PchStore

DISABLE_ENV = "CUDAGENT_BUILD_CACHE"
MAX_ENV = "CUDAGENT_BUILD_CACHE_MAX_GB"
DEFAULT_MAX_GB = 8.0
TEXT = "expanded.ii"  # the unit's audited text (expanded.py), stored with its entry for direct hits
TRIM_EVERY = 16  # stores, on average, between two checks of the cache's size


def _value_after(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None


def _preprocess_command(argv: list[str]) -> list[str] | None:
    """The same command, preprocessing to stdout: -c becomes -E, the output and dependency files go."""
    if "-c" not in argv or "-o" not in argv:
        return None
    out, skip = [], 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        if arg in ("-o", "-MF"):
            skip = 1
            continue
        if arg == "-MMD":
            continue
        out.append("-E" if arg == "-c" else arg)
    return out


def _compiler_identity(compiler: str) -> list:
    path = shutil.which(compiler) or compiler
    try:
        st = os.stat(os.path.realpath(path))
        return [os.path.realpath(path), st.st_size, st.st_mtime_ns]
    except OSError:
        return [path]


def preprocess(argv: list[str]) -> bytes | None:
    """The unit as the preprocessor leaves it, or None when it cannot be preprocessed (the compile then says why)."""
    command = _preprocess_command(argv)
    if command is None:
        return None
    proc = subprocess.run(command, capture_output=True)
    return proc.stdout if proc.returncode == 0 else None


def cache_key(argv: list[str], preprocessed: bytes) -> str:
    """The unit's key: the compiler, the command line and the preprocessed text."""
    digest = hashlib.sha256(json.dumps([_compiler_identity(argv[0]), argv]).encode())
    digest.update(preprocessed)
    return digest.hexdigest()


def _entry(root: Path, key: str) -> Path:
    return root / "objects" / key[:2] / key


def compile_unit(argv: list[str], root: Path) -> int:
    """Compile (or copy from the cache) one unit; the compiler's exit status. Writes what the compiler printed.
    Builds that miss on the same unit at once (parallel workspaces, their common binding.cpp) take turns: the first
    compiles, the others wait for it and copy its object."""
    out, dep = _value_after(argv, "-o"), _value_after(argv, "-MF")
    cached = out is not None and os.environ.get(DISABLE_ENV) != "0"
    compiler = _compiler_identity(argv[0])
    direct = DirectLookup.of(argv, root, compiler) if cached else None
    if direct is not None:  # the unit and the files it read unchanged: no preprocessor run (manifest.py)
        found = direct.find()
        if found is not None and _copied(_entry(root, found), out, dep, with_text=True):
            return 0
    preprocessed = preprocess(argv) if out else None
    if preprocessed is not None:  # what the audit reads of the unit (expanded.py), cached or not
        expanded.write_beside(out, preprocessed)
    key = cache_key(argv, preprocessed) if preprocessed is not None and cached else None
    if key is None:
        return _compile(argv, out, dep, None)
    entry = _entry(root, key)
    if _copied(entry, out, dep):
        _remember(direct, entry, out, preprocessed, key)
        return 0
    lock_path = entry.parent / f".{key}.lock"
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        lock = open(lock_path, "w")  # noqa: SIM115 (held until this unit is compiled)
    except OSError:  # a cache that cannot be written: compile alone
        lock = None
    with lock or contextlib.nullcontext():
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if _copied(entry, out, dep):  # stored while this build waited
                return 0
        # a miss: a precompiled header of the unit's first include, where one applies (pch.py)
        status = _compile(PchStore(root, compiler).arguments_for(argv), out, dep, entry)
        if status == 0:
            _remember(direct, entry, out, preprocessed, key)
        if lock is not None:  # a build that opens it after this finds the entry (or compiles, after a failure)
            with contextlib.suppress(OSError):
                lock_path.unlink()
        return status


def make_pch(argv: list[str], root: Path, cwd: Path) -> bool:
    """Make now the precompiled header a miss of this unit (run in `cwd`) would compile with, at its first miss,
    without compiling the unit (pch.py; `doctor --prepare`); whether one applies to it."""
    return PchStore(root, _compiler_identity(argv[0])).arguments_for(argv, cwd, at_once=True) != argv


def _copied(entry: Path, out: str, dep: str | None, with_text: bool = False) -> bool:
    """The unit's object copied from its cache entry, and what its compile printed written; False on a miss.
    `with_text`: the audited text stored with the entry is copied beside the object too (a direct hit, which has
    not preprocessed the unit), and an entry without it is a miss."""
    if not (entry / "object.o").is_file() or (with_text and not (entry / TEXT).is_file()):
        return False
    try:
        os.utime(entry)  # recently used: the last to go when the cache is trimmed
        if with_text:
            shutil.copyfile(entry / TEXT, out + expanded.SUFFIX)
        shutil.copyfile(entry / "object.o", out)
        if dep and (entry / "deps.d").is_file():
            shutil.copyfile(entry / "deps.d", dep)
        sys.stderr.write((entry / "output.txt").read_text() if (entry / "output.txt").is_file() else "")
        return True
    except OSError:  # an entry that cannot be read: compile instead
        return False


def _remember(direct: DirectLookup | None, entry: Path, out: str, preprocessed: bytes, key: str) -> None:
    """After a preprocessed unit was compiled or copied: its audited text kept with the entry (once) and the files
    it read recorded, so that the next build of it finds the entry without preprocessing."""
    if direct is None or not (entry / "object.o").is_file():
        return
    try:
        if not (entry / TEXT).is_file():
            with tempfile.NamedTemporaryFile("wb", dir=entry, prefix=".tmp-", delete=False) as f:
                f.write(Path(out + expanded.SUFFIX).read_bytes())
            os.replace(f.name, entry / TEXT)
    except OSError:  # an entry that cannot be written: the next build preprocesses
        return
    direct.record(preprocessed, key)


def _compile(run: list[str], out: str, dep: str | None, entry: Path | None) -> int:
    proc = subprocess.run(run, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode == 0 and entry is not None and os.path.isfile(out):
        try:
            _store(entry, out, dep, proc.stdout + proc.stderr)
            if secrets.randbelow(TRIM_EVERY) == 0:
                trim(root_of(entry), max_bytes())
        except OSError:  # a cache that cannot be written (read-only, full) costs the next build the compile only
            pass
    return proc.returncode


def root_of(entry: Path) -> Path:
    return entry.parent.parent.parent  # root / objects / key[:2] / key


def max_bytes() -> int:
    """The size the build cache (objects and precompiled headers) is trimmed to: CUDAGENT_BUILD_CACHE_MAX_GB."""
    try:
        gb = float(os.environ.get(MAX_ENV) or DEFAULT_MAX_GB)
    except ValueError:
        gb = DEFAULT_MAX_GB
    return int(gb * 2**30)


def trim(root: Path, limit: int) -> list[Path]:
    """Remove the least recently used entries (objects, precompiled headers) until the cache holds at most 80% of
    `limit` bytes, if it holds more than `limit`; the entries removed. A build reading one as it goes compiles
    instead; one using a precompiled header keeps the file it opened."""
    entries = []
    kept = [*(root / "objects").glob("??/*"), *(root / "manifests").glob("??/*"), *(root / "pch").glob("*")]
    for folder in kept:
        if folder.is_dir() and not folder.name.startswith(".tmp-"):
            try:
                size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
                entries.append((folder.stat().st_mtime, size, folder))
            except OSError:  # removed meanwhile
                continue
    total = sum(size for _, size, _ in entries)
    removed = []
    if total <= limit:
        return removed
    for _, size, folder in sorted(entries, key=lambda e: e[0]):
        if total <= 0.8 * limit:
            break
        shutil.rmtree(folder, ignore_errors=True)
        total -= size
        removed.append(folder)
    return removed


def _store(entry: Path, out: str, dep: str | None, output: str) -> None:
    """Written to a temporary folder and renamed into place: a reader sees a whole entry or none."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    shutil.copyfile(out, tmp / "object.o")
    if dep and os.path.isfile(dep):
        shutil.copyfile(dep, tmp / "deps.d")
    (tmp / "output.txt").write_text(output)
    try:
        os.rename(tmp, entry)
    except OSError:  # another build stored the same unit first
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    from cudagent.resources import cache_dir

    argv = sys.argv[1:]
    if argv[:1] == ["--pch-only"]:  # doctor --prepare (extension.run_ninja's pch_only)
        if not make_pch(argv[1:], cache_dir(), Path.cwd()):
            sys.exit(f"no precompiled header applies to {' '.join(argv[1:])[-200:]}")
        sys.exit(0)
    if not argv:
        sys.exit("usage: python -m cudagent.evaluator.toolchain.objcache [--pch-only] COMPILER ARGS... -c SRC -o OUT")
    sys.exit(compile_unit(argv, cache_dir()))


if __name__ == "__main__":
    main()
