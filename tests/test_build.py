"""The incremental CPU build: real compiler, real ninja. Only changed sources recompile; errors are cut to file:line."""

import os
import shutil
import subprocess
import sys
import time

import pytest

import cudagent.evaluator.jail.level as jail_level
from cudagent.device.info import resolve_device
from cudagent.errors import EnvironmentProblem
from cudagent.evaluator.toolchain.extension import build_workspace, toolchain_for
from cudagent.workspace import Workspace
from tests.caches import seeded_cache

KERNEL = """#include <pybind11/pybind11.h>
#include "{header}"
#include "common.h"
static int {name}() {{ return VALUE + {bump}; }}
static void register_{name}(pybind11::module& m) {{ m.def("{name}", &{name}); }}
REGISTER_BINDING({name}, register_{name});
"""


@pytest.fixture(scope="module")
def cpu():
    return resolve_device("cpu")


def make(tmp_path, name="ws"):
    ws = Workspace.create(tmp_path / name, "import torch\n")
    (ws.kernels_dir / "common.h").write_text("#define VALUE 40\n")
    (ws.kernels_dir / "a.cpp").write_text(KERNEL.format(header="../binding_registry.h", name="a", bump=1))
    (ws.kernels_dir / "b.cpp").write_text(KERNEL.format(header="binding_registry.h", name="b", bump=2))
    (ws.kernels_dir / "ignored.cu").write_text("this is not C++ and must not be compiled on the CPU")
    return ws


def call(ws, fn):
    code = f"import sys; sys.path.insert(0, {str(ws.build_dir)!r}); import cuda_extension; print(cuda_extension.{fn}())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def touch_later(path, text):
    time.sleep(0.01)
    path.write_text(text)
    later = time.time() + 2
    os.utime(path, (later, later))


@pytest.mark.slow  # more than a few seconds (the inner loop leaves it out)
def test_incremental_build(tmp_path, cpu):
    ws = make(tmp_path)
    first = build_workspace(ws, cpu)
    assert first.ok, first.errors
    assert sorted(first.recompiled) == ["binding.cpp", "kernels/a.cpp", "kernels/b.cpp"]
    assert call(ws, "a") == "41" and call(ws, "b") == "42"  # both include styles of the registry work
    again = build_workspace(ws, cpu)
    assert again.ok and again.recompiled == []
    touch_later(ws.kernels_dir / "a.cpp", KERNEL.format(header="../binding_registry.h", name="a", bump=5))
    third = build_workspace(ws, cpu)
    assert third.recompiled == ["kernels/a.cpp"]
    assert call(ws, "a") == "45"
    touch_later(ws.kernels_dir / "common.h", "#define VALUE 100\n")
    fourth = build_workspace(ws, cpu)
    assert sorted(fourth.recompiled) == ["kernels/a.cpp", "kernels/b.cpp"]  # header dependencies are tracked
    assert call(ws, "b") == "102"


def _objects() -> set:
    from cudagent.resources import cache_dir

    return {str(p) for p in (cache_dir() / "objects").rglob("object.o")}


@pytest.mark.slow  # converts SmolLM2 or builds an extension cold: the inner loop leaves it out
def test_a_moved_workspace_compiles_nothing_again(tmp_path, cpu):
    """Its build folder is another (each workspace has its own, in the machine's cache), but every command line is
    the same (the workspace is `ws` seen from its build folder), so the compiler cache serves every unit."""
    ws = make(tmp_path)
    assert build_workspace(ws, cpu).ok
    before = _objects()
    moved = Workspace(tmp_path / "moved")
    shutil.copytree(ws.root, moved.root)
    again = build_workspace(moved, cpu)
    assert again.ok and sorted(again.recompiled) == ["binding.cpp", "kernels/a.cpp", "kernels/b.cpp"]
    assert _objects() == before and call(moved, "b") == "42"


@pytest.mark.slow  # builds an extension cold: the inner loop leaves it out
def test_restores_fixed_files_before_building(tmp_path, cpu):
    ws = make(tmp_path)
    (ws.root / "binding.cpp").write_text("#error tampered\n")
    result = build_workspace(ws, cpu)
    assert result.ok and result.restored == ["binding.cpp"]


@pytest.mark.slow  # a real compile of the workspace (20-30 s on two cores)
def test_compile_errors_are_cut_to_file_and_line(tmp_path, cpu):
    ws = make(tmp_path)
    (ws.kernels_dir / "bad.cpp").write_text(
        "#include <pybind11/pybind11.h>\nint f() {\n  return undefined_name + 1;\n}\n"
    )
    result = build_workspace(ws, cpu)
    assert not result.ok
    assert result.errors.startswith("1 compiler error;")
    assert "kernels/bad.cpp:3:" in result.errors and "undefined_name" in result.errors
    assert str(ws.root) not in result.errors and len(result.errors) < 2000
    assert len(result.log) > len(result.errors)


def test_build_timeout_kills_the_compiler(tmp_path, cpu):
    """In the build's jail (where bubblewrap runs) its PID namespace ends every compiler with the build."""
    ws = make(tmp_path)
    result = build_workspace(ws, cpu, timeout_s=0.3, jail=jail_level.decide("best-effort", "cpu"))
    assert not result.ok and result.timed_out
    assert "0 s limit" in result.errors or "limit" in result.errors
    time.sleep(0.2)
    procs = subprocess.run(["pgrep", "-f", str(ws.build_dir)], capture_output=True, text=True).stdout
    assert procs.strip() == ""


def test_missing_compiler_is_an_environment_problem(monkeypatch):
    cpu = resolve_device("cpu")
    toolchain_for.cache_clear()
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    try:
        with pytest.raises(EnvironmentProblem, match="compiler"):
            toolchain_for(cpu)
    finally:
        toolchain_for.cache_clear()


def _entries(cache) -> set[str]:
    return {p.name for p in (cache / "objects").glob("*/*")} if (cache / "objects").is_dir() else set()


@pytest.mark.slow
def test_another_workspace_with_the_same_units_copies_them_from_the_compiler_cache(tmp_path, cpu, monkeypatch):
    """Units that preprocess the same (whatever their comments) are a copy; one changed token compiles anew."""
    cache = seeded_cache(tmp_path / "cache", facts=("pch",))  # its objects its own: the counts are this test's
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(cache))
    first = make(tmp_path, "first")
    assert build_workspace(first, cpu).ok
    stored = _entries(cache)
    assert len(stored) == 3  # binding.cpp, a.cpp, b.cpp
    second = make(tmp_path, "second")
    with open(second.kernels_dir / "a.cpp", "a") as f:
        f.write("// a comment changes nothing the compiler sees\n")
    result = build_workspace(second, cpu)
    assert result.ok and len(result.recompiled) == 3 and _entries(cache) == stored
    assert call(second, "a") == "41" and call(second, "b") == "42"
    third = make(tmp_path, "third")
    (third.kernels_dir / "common.h").write_text("#define VALUE 50\n")  # every unit including it differs now
    assert build_workspace(third, cpu).ok
    assert len(_entries(cache) - stored) == 2  # a.cpp and b.cpp; binding.cpp still a copy
    assert call(third, "a") == "51" and call(third, "b") == "52"


@pytest.mark.slow
def test_the_compiler_cache_stores_no_failed_unit_and_can_be_switched_off(tmp_path, cpu, monkeypatch):
    cache = seeded_cache(tmp_path / "cache", facts=("pch",))  # its objects its own: the counts are this test's
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(cache))
    ws = make(tmp_path)
    (ws.kernels_dir / "b.cpp").write_text("int broken( {\n")
    result = build_workspace(ws, cpu)
    assert not result.ok and "kernels/b.cpp:1" in result.errors
    assert len(_entries(cache)) == 2  # binding.cpp and a.cpp compiled; b.cpp failed and is not stored
    monkeypatch.setenv("CUDAGENT_BUILD_CACHE", "0")
    other = make(tmp_path, "other")
    (other.kernels_dir / "common.h").write_text("#define VALUE 7\n")
    assert build_workspace(other, cpu).ok and call(other, "a") == "8"
    assert len(_entries(cache)) == 2


def test_the_oldest_build_folders_go_beyond_the_newest_kept(tmp_path):
    from cudagent.evaluator.toolchain.extension import trim_build_folders

    for i in range(7):
        (tmp_path / f"ws-{i}").mkdir()
        os.utime(tmp_path / f"ws-{i}", (1000 + i, 1000 + i))
    (tmp_path / "a-call.lock").write_text("")  # a lock file beside the folders stays
    removed = trim_build_folders(tmp_path, keep=4)
    assert sorted(p.name for p in removed) == ["ws-0", "ws-1", "ws-2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-call.lock", "ws-3", "ws-4", "ws-5", "ws-6"]
