"""The doctest examples of every module that carries them (found by reading the sources, so none is forgotten)."""

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in (ROOT / "cudagent").rglob("*.py")
    if ">>> " in p.read_text()
)


def test_the_modules_with_examples_are_found():
    assert {"cudagent.evaluator.verdict", "cudagent.agent.best"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    failures, tried = doctest.testmod(importlib.import_module(name))
    assert tried > 0 and failures == 0
