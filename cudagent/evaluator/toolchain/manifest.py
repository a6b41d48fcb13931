"""The compiler cache's direct lookups: a unit found again from its source and the files it read, with no
preprocessor run.

    lookup = DirectLookup.of(argv, root, compiler_identity)   None where a unit cannot be looked up directly
    key = lookup.find()                    the full cache key (objcache.cache_key) of a unit compiled before
    lookup.record(preprocessed, key)       after a preprocessed unit was compiled or copied

The full key hashes the unit as the preprocessor leaves it, which costs a preprocessor run (a second of CPU for a
unit that includes torch, some 5,400 headers) on every build, cached or not. Here a unit is first keyed without it:
the compiler, the command line, the compiler's environment and the unit's own source. Each such key keeps the sets
of files its units read before (a manifest per set, written when the full key was known), each with the key it
led to. A manifest holds when every file in it is still what it was:

- the candidate's files (every name the line markers give that is not under a system include folder: the
  workspace's sources and headers, and any absolute path elsewhere) by their contents' hash;
- the toolchain's headers (under an `-isystem` folder of the command line or the compiler's own folders: torch,
  Python, the C++ library) by their identity (size, modification and change times, inode): a reinstalled package
  gives new change times and inodes, and no candidate writes there;
- what lies in the relative include folders (the workspace: `-I ws`) under the name of a file it read, and every
  link there, so that a header added where the preprocessor would find it first (shadowing one it found before)
  sends the unit back to the preprocessor; other files (notes, model_new.py) change nothing.

A unit whose files use __DATE__, __TIME__ or __TIMESTAMP__ is not looked up directly, nor one that read something
that is not a regular file. A hit copies the entry's object and its audited text (the `.ii` beside the object,
stored with the entry), the same pair a preprocessed hit copies: a stale manifest could at worst give an object
with the text it was compiled from, never one with another's. CUDAGENT_BUILD_CACHE_DIRECT=0 preprocesses every unit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

DIRECT_ENV = "CUDAGENT_BUILD_CACHE_DIRECT"
MAX_MANIFESTS = 8  # sets of files kept per direct key (the same unit with different headers)
MAX_LISTED = 5000  # entries of the relative include folders; more: the unit is preprocessed
# what the compiler reads from its environment, besides the command line
COMPILER_ENV = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "LIBRARY_PATH")
SYSTEM_DIRS = ("/usr/include", "/usr/local/include", "/usr/lib/gcc")
_MARKER_NAME = re.compile(rb'^# \d+ "((?:[^"\\\n]|\\.)*)"', re.M)
_CLOCK_MACRO = re.compile(rb"__(?:DATE|TIME|TIMESTAMP)__")


def enabled() -> bool:
    return os.environ.get(DIRECT_ENV) != "0"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _identity(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino] if os.path.isfile(path) else None


def _contents(path: str) -> str | None:
    """The hash of a regular file's bytes, or None (missing, a device or a fifo, unreadable, or it names a clock)."""
    try:
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return None if _CLOCK_MACRO.search(data) else _sha(data)


def _flag_values(argv: list[str], flag: str) -> list[str]:
    """Every value of `flag` on the command line, separate (`-I dir`) or joined (`-Idir`)."""
    values = []
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            values.append(argv[i + 1])
        elif arg.startswith(flag) and arg != flag:
            values.append(arg[len(flag) :])
    return values


@dataclass
class DirectLookup:
    """One unit's direct key and what a manifest of it is checked against."""

    root: Path  # the cache directory
    key: str  # compiler, command line, environment, the unit's own bytes
    system: tuple[str, ...]  # folders whose headers count by identity
    listed: tuple[str, ...]  # relative include folders whose listing counts

    @classmethod
    def of(cls, argv: list[str], root: Path, compiler_identity: list) -> DirectLookup | None:
        if not enabled() or "-c" not in argv:
            return None
        source = argv[argv.index("-c") + 1] if argv.index("-c") + 1 < len(argv) else None
        contents = _contents(source) if source else None
        if contents is None:
            return None
        named = [d.rstrip(os.sep) for d in _flag_values(argv, "-isystem") + list(SYSTEM_DIRS) if os.path.isabs(d)]
        system = tuple(sorted(set(named) | {os.path.realpath(d) for d in named}))
        listed = tuple(sorted({d for d in _flag_values(argv, "-I") if not os.path.isabs(d)}))
        env = {name: os.environ.get(name) for name in COMPILER_ENV}
        head = json.dumps([compiler_identity, argv, env, contents])
        return cls(root, _sha(head.encode()), system, listed)

    @property
    def folder(self) -> Path:
        return self.root / "manifests" / self.key[:2] / self.key

    def find(self) -> str | None:
        """The full key of the first manifest that still holds, or None."""
        try:
            manifests = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            return None
        found = None
        for path in manifests[:MAX_MANIFESTS]:
            try:
                manifest = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if found is None:
                found = self._found_in_listed()
            if found is None:
                return None
            if manifest.get("listing") == _listing(found, manifest["files"]) and self._holds(manifest["files"]):
                os.utime(path)
                return manifest["key"]
        return None

    def record(self, preprocessed: bytes, key: str) -> None:
        """Keep the set of files `preprocessed` was read from, leading to `key`; nothing where one of them cannot
        be told (not a regular file, a clock macro) or the cache cannot be written."""
        files = {}
        for raw in set(_MARKER_NAME.findall(preprocessed)):
            name = raw.decode("utf-8", errors="surrogateescape").replace('\\"', '"').replace("\\\\", "\\")
            if name.startswith("<"):  # <built-in>, <command-line>
                continue
            seen = self._seen(name)
            if seen is None:
                return
            files[name] = seen
        found = self._found_in_listed()
        if found is None:
            return
        text = json.dumps({"key": key, "listing": _listing(found, files), "files": files}, sort_keys=True)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            target = self.folder / f"{_sha(text.encode())[:32]}.json"
            if target.is_file():
                os.utime(target)
                return
            with tempfile.NamedTemporaryFile("w", dir=self.folder, prefix=".tmp-", delete=False) as f:
                f.write(text)
            os.replace(f.name, target)
            for old in sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime)[:-MAX_MANIFESTS]:
                old.unlink(missing_ok=True)
        except OSError:  # a cache that cannot be written: the next build preprocesses
            pass

    def _seen(self, name: str) -> list | str | None:
        """What a file is checked by: its identity where it is a toolchain header, else its contents' hash."""
        if os.path.isabs(name) and os.path.normpath(name).startswith(self._system_prefixes):
            return _identity(name)
        return _contents(name)

    @property
    def _system_prefixes(self) -> tuple[str, ...]:
        return tuple(d + os.sep for d in self.system)

    def _holds(self, files: dict) -> bool:
        for name, seen in files.items():
            if (_identity(name) if isinstance(seen, list) else _contents(name)) != seen:
                return False
        return True

    def _found_in_listed(self) -> list[tuple[str, bool]] | None:
        """Every file and link under the relative include folders, (path, is a link); None where too many."""
        found = []
        for folder in self.listed:
            for top, dirs, names in os.walk(folder):
                dirs.sort()
                found += [(f"{top}/{n}", True) for n in dirs if os.path.islink(os.path.join(top, n))]
                found += [(f"{top}/{n}", os.path.islink(os.path.join(top, n))) for n in sorted(names)]
                if len(found) > MAX_LISTED:
                    return None
        return found


def _listing(found: list[tuple[str, bool]], files: dict) -> str:
    """What of the relative include folders could stand in front of a file the unit read, hashed: every file there
    named like one of them (the preprocessor finds a header by its name: ws/vector would be <vector>, and
    ws/kernels/value.h a "value.h" found in ws/ before), and every link (what lies behind one is not walked)."""
    names = {os.path.basename(name) for name in files}
    picked = [path for path, link in found if link or os.path.basename(path) in names]
    return _sha("\n".join(picked).encode())
