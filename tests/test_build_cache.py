"""The build cache keeps to its size: the least recently used objects and precompiled headers go first, and a
unit copied from the cache counts as used (cudagent/evaluator/toolchain/objcache.py)."""

import os
import re
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


# ----- direct lookups (manifest.py): a unit found again without the preprocessor ---------------------------------


@pytest.fixture
def direct(tmp_path, monkeypatch):
    """A build folder whose unit includes a workspace header (`-I ws`, quoted) and a toolchain header (`-isystem`),
    compiled through a g++ that notes every run: `P` for a preprocessing, `C` for a compile."""
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "runs.log"
    cxx = tmp_path / "cxx"
    cxx.write_text(f'#!/bin/sh\ncase " $* " in *" -E "*) echo P >> {log};; *) echo C >> {log};; esac\nexec g++ "$@"\n')
    cxx.chmod(0o755)
    (tmp_path / "ws" / "kernels").mkdir(parents=True)
    (tmp_path / "ws" / "kernels" / "unit.cpp").write_text(
        '#include "value.h"\n#include <limit.h>\nint f() { return VALUE + LIMIT; }\n'
    )
    (tmp_path / "ws" / "value.h").write_text("#define VALUE 1\n")
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "limit.h").write_text("#define LIMIT 10\n")
    argv = [str(cxx), "-MMD", "-MF", "unit.o.d", "-Iws", "-isystem", str(tmp_path / "sys"), "-O2", "-c",
            "ws/kernels/unit.cpp", "-o", "unit.o"]  # fmt: skip
    cache = tmp_path / "cache"

    def build() -> tuple[str, int]:
        """The runs this build made, and what the object's f() returns (read off its disassembly's constant)."""
        before = log.read_text() if log.exists() else ""
        assert compile_unit(argv, cache) == 0
        made = subprocess.run(["objdump", "-d", "unit.o"], capture_output=True, text=True, check=True).stdout
        value = int(re.search(r"mov\s+\$0x([0-9a-f]+),%eax", made).group(1), 16)
        return log.read_text()[len(before) :].replace("\n", ""), value

    return tmp_path, build


needs_toolchain = pytest.mark.skipif(
    shutil.which("g++") is None or shutil.which("objdump") is None, reason="needs g++ and objdump"
)


@needs_toolchain
def test_a_unit_built_before_is_copied_without_preprocessing_with_its_audited_text(direct):
    root, build = direct
    assert build() == ("PC", 11)  # preprocessed for its key and audited text, then compiled
    text = (root / "unit.o.ii").read_text()
    assert "return 1" in text and "value.h" in text
    (root / "unit.o.ii").unlink()
    assert build() == ("", 11)  # nothing run: the files it read are unchanged
    assert (root / "unit.o.ii").read_text() == text  # the same audited text as the preprocessing gave
    (root / "ws" / "notes.md").write_text("a file no include could find\n")
    assert build() == ("", 11)  # the workspace's other files change nothing


@needs_toolchain
def test_a_header_rewritten_with_its_size_and_times_kept_is_preprocessed_and_compiled_again(direct):
    """An edit that keeps a workspace header's size and modification time (a shell can set both back) is seen: the
    candidate's files count by their contents."""
    root, build = direct
    assert build() == ("PC", 11)
    header = root / "ws" / "value.h"
    times = header.stat()
    header.write_text("#define VALUE 7\n")
    os.utime(header, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert build() == ("PC", 17)


@needs_toolchain
def test_a_header_added_where_the_preprocessor_looks_first_is_seen(direct):
    """A new value.h beside the unit shadows ws/value.h (a quoted include looks in the includer's folder first):
    no file the unit read changed, but the listing of the workspace did."""
    root, build = direct
    assert build() == ("PC", 11)
    (root / "ws" / "kernels" / "value.h").write_text("#define VALUE 3\n")
    assert build() == ("PC", 13)
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "limit.h").write_text("#define LIMIT 30\n")
    (root / "ws" / "more").symlink_to(root / "elsewhere")  # what lies behind a link is not walked: it counts
    assert build() == ("P", 13)  # preprocessed (the same text: a copy)


@needs_toolchain
def test_a_toolchain_header_replaced_is_seen_and_a_clock_macro_is_never_looked_up(direct):
    root, build = direct
    assert build() == ("PC", 11)
    limit = root / "sys" / "limit.h"
    times = limit.stat()
    limit.unlink()
    limit.write_text("#define LIMIT 20\n")  # a reinstall: a new inode and change time, the old modification time
    os.utime(limit, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert build() == ("PC", 21)
    # __DATE__, not __TIME__: the text must stay the same between the two builds below (a second apart on a loaded
    # machine, __TIME__'s text differed and the third build compiled)
    (root / "ws" / "value.h").write_text("#define VALUE (sizeof(__DATE__) - 11)\n")
    assert build() == ("PC", 21)
    assert build() == ("P", 21)  # preprocessed every time (then a copy): its files name the clock
