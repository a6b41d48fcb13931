"""The build cache keeps to its size: the least recently used objects and precompiled headers go first, and a
unit copied from the cache counts as used (cudagent/evaluator/toolchain/objcache.py)."""

import os
import shutil
import subprocess
import sys

import pytest

from cudagent.evaluator.toolchain.objcache import compile_unit, max_bytes, trim


def _entry(root, rel: str, size: int, age_s: float):
    folder = root / rel
    folder.mkdir(parents=True)
    (folder / "object.o").write_bytes(b"x" * size)
    when = 1_700_000_000 - age_s
    os.utime(folder, (when, when))
    return folder


def test_the_least_recently_used_entries_go_first(tmp_path):
    old = _entry(tmp_path, "objects/aa/old", 400, age_s=300)
    pch = _entry(tmp_path, "pch/header", 400, age_s=200)
    recent = _entry(tmp_path, "objects/bb/recent", 400, age_s=10)
    assert trim(tmp_path, 2000) == []  # 1200 bytes under a 2000-byte limit: nothing goes
    assert trim(tmp_path, 900) == [old, pch]  # down to 80% of the limit (720 bytes), oldest first
    assert recent.is_dir() and not old.exists() and not pch.exists()


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_unit_copied_from_the_cache_is_marked_used(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "unit.cpp").write_text("int f() { return 1; }\n")
    argv = ["g++", "-MMD", "-MF", "unit.o.d", "-O2", "-c", "unit.cpp", "-o", "unit.o"]
    cache = tmp_path / "cache"
    assert compile_unit(argv, cache) == 0
    (entry,) = (cache / "objects").glob("??/*")
    os.utime(entry, (1_000_000_000, 1_000_000_000))
    assert compile_unit(argv, cache) == 0  # a copy
    assert entry.stat().st_mtime > 1_000_000_000


def test_the_size_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("CUDAGENT_BUILD_CACHE_MAX_GB", "0.5")
    assert max_bytes() == 2**29
    monkeypatch.setenv("CUDAGENT_BUILD_CACHE_MAX_GB", "lots")
    assert max_bytes() == 8 * 2**30


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_builds_missing_the_same_unit_at_once_compile_it_once(tmp_path):
    """Parallel workspaces start with the same units (binding.cpp): the first build compiles, the others wait for it
    and copy its object, instead of compiling it beside it."""
    log = tmp_path / "compiles.log"
    cxx = tmp_path / "cxx"  # g++, noting each compile (not the preprocessing) and taking a second over it
    cxx.write_text(f'#!/bin/sh\ncase " $* " in *" -c "*) echo compile >> {log}; sleep 1;; esac\nexec g++ "$@"\n')
    cxx.chmod(0o755)
    argv = [str(cxx), "-MMD", "-MF", "unit.o.d", "-O2", "-c", "unit.cpp", "-o", "unit.o"]
    env = dict(os.environ, CUDAGENT_CACHE_DIR=str(tmp_path / "cache"))
    builds = []
    for name in ("one", "two", "three"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "unit.cpp").write_text("int f() { return 1; }\n")
        command = [sys.executable, "-m", "cudagent.evaluator.toolchain.objcache", *argv]
        builds.append(subprocess.Popen(command, cwd=tmp_path / name, env=env))
    assert [b.wait(timeout=60) for b in builds] == [0, 0, 0]
    assert all((tmp_path / name / "unit.o").stat().st_size > 0 for name in ("one", "two", "three"))
    assert log.read_text().split() == ["compile"]
