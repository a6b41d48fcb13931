"""The workspace: fixed files restored from their hashes, candidates found and mirrored, formats told apart."""

import os
import time

import pytest

from cudagent.errors import CandidateError
from cudagent.workspace import INFRA_FILES, CandidateFormat, Workspace, resolve_candidate, workspace_for

TASK = "import torch\n"


def test_create_writes_fixed_files_and_a_read_only_reference(tmp_path):
    ws = Workspace.create(tmp_path / "ws", TASK)
    for name in INFRA_FILES:
        assert (ws.root / name).is_file()
    assert ws.model_py.read_text() == TASK
    assert not os.access(ws.model_py, os.W_OK) or os.geteuid() == 0
    assert oct(ws.model_py.stat().st_mode & 0o777) == "0o444"
    assert ws.kernels_dir.is_dir()


def test_tampered_fixed_files_are_restored(tmp_path):
    ws = Workspace.create(tmp_path / "ws", TASK)
    (ws.root / "binding.cpp").write_text("// mine now\n")
    (ws.root / "binding_registry.h").unlink()
    ws.model_py.chmod(0o644)
    ws.model_py.write_text("import os\n")
    assert sorted(ws.tampered_infrastructure(TASK)) == ["binding.cpp", "binding_registry.h", "model.py"]
    assert sorted(ws.ensure_infrastructure(TASK)) == ["binding.cpp", "binding_registry.h", "model.py"]
    assert ws.tampered_infrastructure(TASK) == []
    assert "REGISTER_BINDING" in (ws.root / "binding_registry.h").read_text()


def test_registry_header_defines_the_contract():
    from cudagent.workspace import infrastructure

    header = infrastructure()["binding_registry.h"]
    assert "#define REGISTER_BINDING(name, fn)" in header and "pybind11::module&" in header
    assert "PYBIND11_MODULE(cuda_extension, m)" in infrastructure()["binding.cpp"]


def test_candidate_formats(tmp_path):
    ws = Workspace.create(tmp_path / "ws", TASK)
    ws.model_new_py.write_text("import cuda_extension\nclass ModelNew: pass\n")
    assert ws.candidate_format() is CandidateFormat.WORKSPACE
    ws.model_new_py.write_text("from torch.utils.cpp_extension import load_inline\nx = load_inline(name='a')\n")
    assert ws.candidate_format() is CandidateFormat.INLINE
    ws.model_new_py.write_text("import torch\n")
    assert ws.candidate_format() is CandidateFormat.PYTHON


def test_compiled_sources_by_device(tmp_path):
    ws = Workspace.create(tmp_path / "ws", TASK)
    for name in ("a.cu", "a_binding.cpp", "b.cuh", "notes.txt"):
        (ws.kernels_dir / name).write_text("//\n")
    names = lambda cuda: [p.name for p in ws.compiled_sources(cuda)]  # noqa: E731
    assert names(True) == ["binding.cpp", "a.cu", "a_binding.cpp"]
    assert names(False) == ["binding.cpp", "a_binding.cpp"]  # CPU mode builds the .cpp sources only
    assert [p.name for p in ws.kernel_sources()] == ["a.cu", "a_binding.cpp", "b.cuh"]


def test_resolve_candidate_errors(tmp_path):
    with pytest.raises(CandidateError, match="does not exist"):
        resolve_candidate(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CandidateError, match="has no model_new.py"):
        resolve_candidate(tmp_path / "empty")
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(CandidateError, match="not a Python file"):
        resolve_candidate(tmp_path / "x.txt")


def test_staging_mirrors_changes_only(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(tmp_path / "cache"))
    cand = tmp_path / "cand"
    (cand / "kernels").mkdir(parents=True)
    (cand / "model_new.py").write_text("import cuda_extension\n")
    (cand / "kernels" / "k.cpp").write_text("// k\n")
    (cand / "kernels" / "old.cpp").write_text("// old\n")
    ws = workspace_for(resolve_candidate(cand), TASK)
    assert str(ws.root).startswith(str(tmp_path / "cache"))
    staged = ws.kernels_dir / "k.cpp"
    before = staged.stat().st_mtime_ns
    time.sleep(0.01)
    (cand / "kernels" / "old.cpp").unlink()
    ws2 = workspace_for(resolve_candidate(cand), TASK)
    assert ws2.root == ws.root
    assert staged.stat().st_mtime_ns == before  # unchanged file untouched: ninja will not rebuild it
    assert not (ws.kernels_dir / "old.cpp").exists()
    assert not (cand / "build").exists() and not (cand / "binding.cpp").exists()  # the user's directory stays clean


def test_a_full_workspace_is_used_in_place(tmp_path):
    ws = Workspace.create(tmp_path / "ws", TASK)
    ws.model_new_py.write_text("import cuda_extension\n")
    assert workspace_for(resolve_candidate(ws.root), TASK).root == ws.root


def test_one_candidate_checked_against_two_tasks_is_staged_twice(tmp_path, monkeypatch):
    """Two checks of one candidate directory against different tasks, at once, must not write each other's task
    file into a shared staging workspace (the evaluator would call that tampering)."""
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(tmp_path / "cache"))
    cand = tmp_path / "cand"
    (cand / "kernels").mkdir(parents=True)
    (cand / "model_new.py").write_text("import cuda_extension\n")
    (cand / "kernels" / "k.cpp").write_text("// k\n")
    other_task = TASK + "# another task\n"
    assert other_task != TASK
    first = workspace_for(resolve_candidate(cand), TASK)
    second = workspace_for(resolve_candidate(cand), other_task)
    assert first.root != second.root
    assert not first.tampered_infrastructure(TASK) and not second.tampered_infrastructure(other_task)
