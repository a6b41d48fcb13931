"""Precompiled headers in the compiler cache (cudagent/evaluator/toolchain/pch.py), with the real g++ on a small
stand-in for torch's headers: made on the second miss, used only where exact, made again when a header it read
changes."""

import os
import shutil
import subprocess
import time

import pytest

from cudagent.evaluator.toolchain.objcache import _compiler_identity, compile_unit
from cudagent.evaluator.toolchain.pch import PchStore, leading_system_include

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

HEAVY = """#pragma once
#include <pybind11/inner.h>
#include <map>
#include <string>
#include <vector>
template <typename T> struct Box { T value; T twice() const { return value + value; } };
"""
INNER = "#pragma once\ninline int inner_value() { return %d; }\n"
UNIT = """// a unit that starts with the heavy header
#include <pybind11/heavy.h>
int %s() { return Box<int>{inner_value()}.twice(); }
"""


def test_the_first_include_is_found_only_when_it_comes_first():
    assert leading_system_include("// c\n/* a\n b */\n#include <torch/types.h>\nint x;") == "torch/types.h"
    assert leading_system_include("  #  include <torch/extension.h> // why\n") == "torch/extension.h"
    assert leading_system_include("/* one */ #include <pybind11/pybind11.h>\n") == "pybind11/pybind11.h"
    assert leading_system_include("#define X 1\n#include <torch/types.h>\n") is None  # a macro before it
    assert leading_system_include('#include "torch/types.h"\n') is None  # the workspace's search path first
    assert leading_system_include("#include <vector>\n#include <torch/types.h>\n") is None  # not worth a PCH
    assert leading_system_include("") is None


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A system include folder with pybind11/heavy.h (including pybind11/inner.h), and a workspace whose build/
    folder is the working directory, as under ninja."""
    system = tmp_path / "system" / "pybind11"
    system.mkdir(parents=True)
    (system / "heavy.h").write_text(HEAVY)
    (system / "inner.h").write_text(INNER % 20)
    work = tmp_path / "ws" / "build"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    return tmp_path


def _argv(tree, name: str) -> list[str]:
    return ["g++", "-MMD", "-MF", f"{name}.o.d", "-I..", "-isystem", str(tree / "system"), "-O2", "-fPIC"] + [
        "-c",
        f"../{name}.cpp",
        "-o",
        f"{name}.o",
    ]


def _compile(tree, name: str, cache, value_of_unit: str | None = None) -> bytes:
    work = tree / "ws" / "build"
    (work.parent / f"{name}.cpp").write_text(UNIT % (value_of_unit or name))
    assert compile_unit(_argv(tree, name), cache) == 0
    return (work / f"{name}.o").read_bytes()


def _gch(cache) -> list:
    return sorted(cache.glob("pch/*/include/pybind11/heavy.h.gch"))


def _plain_object(tree, name: str, scratch) -> bytes:
    """The same unit compiled with no cache at all, for comparison."""
    work = tree / "ws" / "build"
    subprocess.run(_argv(tree, name)[:-1] + [str(scratch)], cwd=work, check=True)
    return scratch.read_bytes()


def test_made_on_the_second_miss_and_the_object_is_the_same(tree):
    cache = tree / "cache"
    _compile(tree, "first", cache)
    assert not _gch(cache)  # one miss: nothing made
    second = _compile(tree, "second", cache)
    assert len(_gch(cache)) == 1
    assert second == _plain_object(tree, "second", tree / "plain.o")
    # from now on a miss compiles with it
    argv = PchStore(cache, _compiler_identity("g++")).arguments_for(_argv(tree, "second"))
    assert argv[1] == "-isystem" and argv[2].endswith("include")


def _uses_pch(tree, cache, name) -> bool:
    argv = PchStore(cache, _compiler_identity("g++")).arguments_for(_argv(tree, name))
    proc = subprocess.run(argv[:-2] + ["-o", os.devnull, "-H"], cwd=tree / "ws" / "build", capture_output=True)
    return b"! " in proc.stderr and b"heavy.h.gch" in proc.stderr


def test_gcc_reads_it_and_a_workspace_header_in_front_of_one_it_read_turns_it_off(tree):
    cache = tree / "cache"
    for name in ("one", "two"):
        (tree / "ws" / f"{name}.cpp").write_text(UNIT % name)
    store = PchStore(cache, _compiler_identity("g++"))
    for name in ("one", "two"):
        store.arguments_for(_argv(tree, name))  # two misses: made
    assert _uses_pch(tree, cache, "one")
    # The workspace (-I..) now has its own pybind11/inner.h: without a PCH g++ would read it, so none is used
    (tree / "ws" / "pybind11").mkdir()
    (tree / "ws" / "pybind11" / "inner.h").write_text(INNER % 99)
    assert store.arguments_for(_argv(tree, "one")) == _argv(tree, "one")
    (tree / "ws" / "pybind11" / "inner.h").unlink()
    assert store.arguments_for(_argv(tree, "one")) != _argv(tree, "one")
    (tree / "ws" / "map").write_text("#error the workspace's own <map>\n")  # stands in front of the standard one
    assert store.arguments_for(_argv(tree, "one")) == _argv(tree, "one")


def test_a_header_changed_in_place_makes_it_again(tree):
    cache = tree / "cache"
    _compile(tree, "a", cache)
    _compile(tree, "b", cache)
    (made,) = _gch(cache)
    first_made = made.stat().st_mtime_ns
    time.sleep(0.01)
    (tree / "system" / "pybind11" / "inner.h").write_text(INNER % 21)  # a torch upgraded in place
    fresh = _compile(tree, "c", cache)  # the stale PCH is not used: it is made again first
    assert fresh == _plain_object(tree, "c", tree / "plain.o")  # inner_value() is 21 in both
    (remade,) = _gch(cache)
    assert remade.stat().st_mtime_ns != first_made


def test_a_header_that_does_not_compile_is_tried_once(tree):
    cache = tree / "cache"
    (tree / "system" / "pybind11" / "heavy.h").write_text(HEAVY + "#ifndef UNIT_OK\n#error needs UNIT_OK\n#endif\n")
    store = PchStore(cache, _compiler_identity("g++"))
    for name in ("x", "y", "z"):
        (tree / "ws" / f"{name}.cpp").write_text(UNIT % name)
        assert store.arguments_for(_argv(tree, name)) == _argv(tree, name)
    assert len(list(cache.glob("pch/*/failed"))) == 1 and not _gch(cache)


def test_a_header_included_again_after_the_pch_is_read_from_its_real_place(tree):
    """GCC looks for X beside X.gch whenever X is included again (a PCH serves only the first include): the header
    there hands it to the real one, whose guard makes it a no-op."""
    cache = tree / "cache"
    _compile(tree, "a", cache)
    _compile(tree, "b", cache)  # made
    assert _gch(cache)
    twice = UNIT.replace("#include <pybind11/heavy.h>\n", "#include <pybind11/heavy.h>\n#include <pybind11/heavy.h>\n")
    (tree / "ws" / "twice.cpp").write_text(twice % "twice")
    assert compile_unit(_argv(tree, "twice"), cache) == 0
    assert (tree / "ws" / "build" / "twice.o").read_bytes() == _plain_object(tree, "twice", tree / "plain.o")
    assert _uses_pch(tree, cache, "twice")
