"""The child process as seen from the parent: crashes, hangs and silent exits become clear failures."""

import pytest

from cudagent.evaluator.jail.process import ChildFailure, ChildProcess, child_env


def load(child, path, timeout=60):
    """Import `path` (a model_new.py) as the candidate's process imports a hand-in's."""
    return child.request(
        {"op": "load", "handin": str(path.parent), "device": "cpu", "import_only": True},
        timeout_s=timeout,
        what="loading the candidate",
    )


def test_segfault_is_reported_by_signal(tmp_path):
    bad = tmp_path / "model_new.py"
    bad.write_text("import ctypes\nctypes.string_at(0)\n")
    with ChildProcess() as child, pytest.raises(ChildFailure) as info:
        load(child, bad)
    assert info.value.code == "CRASHED" and "SIGSEGV" in info.value.message


@pytest.mark.slow  # more than a few seconds (the inner loop leaves it out)
def test_hang_times_out_and_kills_the_group(tmp_path):
    bad = tmp_path / "model_new.py"
    bad.write_text("import subprocess\nsubprocess.Popen(['sleep', '300'])\nwhile True:\n    pass\n")
    child = ChildProcess()
    child.start()
    try:
        with pytest.raises(ChildFailure) as info:
            load(child, bad, timeout=3)
        assert info.value.code == "TIMEOUT"
        assert child.proc.poll() is not None
    finally:
        child.close()


def test_exit_zero_without_result(tmp_path):
    bad = tmp_path / "model_new.py"
    bad.write_text("import os\nprint('[PASS] all good')\nos._exit(0)\n")
    with ChildProcess() as child, pytest.raises(ChildFailure) as info:
        load(child, bad)
    assert info.value.code == "NO_RESULT" and "[PASS] all good" in info.value.output


def test_import_errors_come_back_as_replies(tmp_path):
    bad = tmp_path / "model_new.py"
    bad.write_text("raise ValueError('nope')\n")
    with ChildProcess() as child:
        reply = load(child, bad)
    assert reply["ok"] is False and reply["stage"] == "import" and "nope" in reply["error"]


def test_child_environment_is_sanitized(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    env = child_env(str(tmp_path))
    assert "OPENAI_API_KEY" not in env and env["HOME"] == str(tmp_path)
    assert "/somewhere/else" not in env["PYTHONPATH"]
