"""Caches the tests share: the session's (CUDAGENT_CACHE_DIR, set by conftest.py), and caches of a test's own seeded
with what the session's already knows of this machine."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# What the cache knows of this machine rather than of a task: the compiler cache (its objects and direct lookups),
# precompiled headers, the link audit's calibration, the device's peaks, inductor's compiled kernels. A test with a
# cache of its own starts with these.
MACHINE_FACTS = ("objects", "manifests", "pch", "link-baseline", "peaks", "inductor")


def session_cache() -> Path:
    return Path(os.environ["CUDAGENT_CACHE_DIR"]).resolve()


def seeded_cache(path: Path) -> Path:
    """A cache directory of a test's own (no cached baselines, no staged candidates) that already holds what the
    session's cache knows of this machine, as hard links: a test about baselines or timing does not rebuild the
    compiler cache and the link audit's calibration from nothing. Tests of those caches themselves use empty ones."""
    path.mkdir(parents=True, exist_ok=True)
    for name in MACHINE_FACTS:
        if (session_cache() / name).is_dir() and not (path / name).exists():
            try:
                shutil.copytree(session_cache() / name, path / name, copy_function=os.link)
            except (shutil.Error, OSError):
                pass  # an entry another process was writing: this cache is a little colder, and still correct
    return path
