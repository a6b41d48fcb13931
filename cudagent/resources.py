"""Where files that ship with cudagent live: in the wheel (`cudagent/_data`) or, in a source checkout, at the
repository's top level."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    installed = PACKAGE_DIR / "_data" / name
    if installed.is_dir():
        return installed
    checkout = PACKAGE_DIR.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"cudagent's {name}/ directory is missing from the installation ({installed})")


def skills_dir() -> Path:
    return _data_dir("skills")


def prompts_dir() -> Path:
    return _data_dir("prompts")


def infra_dir() -> Path:
    return PACKAGE_DIR / "infra"


def cache_dir() -> Path:
    """Per-user cache (staged candidates, baseline timings, device peaks); CUDAGENT_CACHE_DIR overrides it."""
    root = os.environ.get("CUDAGENT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cudagent"
    )
    path = Path(root).resolve()  # a relative path or `..` would not survive a chdir, nor the jail's own view
    path.mkdir(parents=True, exist_ok=True)
    return path


def cached_names(kind: str, key: str, make) -> frozenset[str]:
    """A set of names computed once per machine and key (a calibration: the link audit's baseline symbols, the
    macros' machinery) and kept in the cache as `<kind>/<key>.json`; `make(scratch)` computes it in a scratch folder
    of the cache, which is removed after. Written whole or not at all, and made by one process at a time: another
    process that needs the same set meanwhile (two evaluators starting together: bench's workers, a test run's)
    waits for it instead of making it again."""
    import fcntl
    import json
    import tempfile

    root = cache_dir() / kind
    cached = root / f"{key}.json"

    def read() -> frozenset[str] | None:
        try:
            return frozenset(json.loads(cached.read_text())) if cached.is_file() else None
        except (OSError, ValueError):
            return None

    if (names := read()) is not None:
        return names
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if (names := read()) is not None:
            return names
        with tempfile.TemporaryDirectory(dir=root) as scratch:
            made = sorted(make(Path(scratch)))
            tmp = Path(scratch) / "names.json"
            tmp.write_text(json.dumps(made))
            os.replace(tmp, cached)
    return frozenset(made)
