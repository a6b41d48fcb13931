"""The README tells the truth: CI runs its test command, and its examples are ones the tests exercise."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    command = [ln for ln in ci.splitlines() if "python -m pytest" in ln and not ln.startswith("#")]
    assert command and command[0].strip() in README  # the README's command first; then the newest transformers
    assert len(command) <= 2 and all('-m "not gpu"' in ln for ln in command[1:])
    assert re.search(r"with the newest\s+transformers", README)


def test_readme_check_examples_point_at_real_files():
    for task, candidate in re.findall(r"cudagent check (\S+\.py) (\S+)", README):
        assert (ROOT / task).is_file(), task
        assert (ROOT / candidate).exists(), candidate
