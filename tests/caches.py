"""Caches the tests share: the session's (CUDAGENT_CACHE_DIR, set by conftest.py), and caches of a test's own seeded
with what the session's already knows of this machine."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

# What the cache knows of this machine rather than of a task: the compiler cache (its objects and direct lookups),
# precompiled headers, the link audit's calibration, the device's peaks, inductor's compiled kernels. A test with a
# cache of its own starts with these.
MACHINE_FACTS = ("objects", "manifests", "pch", "link-baseline", "peaks", "inductor")


def session_cache() -> Path:
    return Path(os.environ["CUDAGENT_CACHE_DIR"]).resolve()


def seeded_cache(path: Path, facts: tuple[str, ...] = MACHINE_FACTS) -> Path:
    """A cache directory of a test's own (no cached baselines, no staged candidates) that already holds what the
    session's cache knows of this machine, as hard links: a test about baselines or timing does not rebuild the
    compiler cache and the link audit's calibration from nothing. Tests of those caches themselves use empty ones
    (or seed only the others: `facts`)."""
    path.mkdir(parents=True, exist_ok=True)
    for name in facts:
        if (session_cache() / name).is_dir() and not (path / name).exists():
            try:
                shutil.copytree(session_cache() / name, path / name, copy_function=os.link)
            except (shutil.Error, OSError):
                pass  # an entry another process was writing: this cache is a little colder, and still correct
    return path


# The test that reads what the session's `doctor --prepare` made; a session that selects it prepares its cache first.
PREPARE_TEST = "test_doctor_prepare_makes_the_machines_facts_once"
PREPARE_RECORD = "doctor-prepare.json"


def prepare_session_cache(shared: Path) -> dict:
    """`cudagent doctor --prepare` on the session's cache, before the session's first build, as a user's machine is
    prepared: the link audit's calibration and the precompiled headers a workspace's kernels start with, made once
    (the first pytest-xdist worker makes them under a lock in `shared`, the session's common temporary folder; the
    others wait and read its record). The builds after it compile their first unit with the headers precompiled,
    and the test of `--prepare` reads this record instead of making the same headers again in a cache of its own
    (80 CPU seconds). Returns the record: the command's exit code and output, and the headers whose precompiled
    form the cache held right after it."""
    shared.mkdir(parents=True, exist_ok=True)
    with open(shared / (PREPARE_RECORD + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if the command fails
        record = shared / PREPARE_RECORD
        if not record.is_file():
            argv = [sys.executable, "-m", "cudagent", "doctor", "--device", "cpu", "--no-server", "--prepare", "--json"]
            env = {**os.environ, "CUDAGENT_CACHE_DIR": str(session_cache())}
            before = _precompiled_headers()
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1200)
            made = _precompiled_headers()
            record.write_text(
                json.dumps(
                    {
                        "returncode": done.returncode,
                        "stdout": done.stdout,
                        "stderr": done.stderr[-3000:],
                        "pch_before": before,
                        "pch_after": made,
                    }
                )
            )
        return json.loads(record.read_text())


def _precompiled_headers() -> list[str]:
    """The headers the session's cache holds precompiled (each PCH's manifest names its header)."""
    return sorted(json.loads(m.read_text())["header"] for m in (session_cache() / "pch").glob("*/manifest.json"))
