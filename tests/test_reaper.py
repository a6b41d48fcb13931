"""reaper.end_as: a process that ends as its child did, the child's exit code or the signal that killed it."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

MIRROR = """
import os, signal, sys
from cudagent.reaper import end_as, wait_for
child = os.fork()
if child == 0:
    if sys.argv[1] == "exit":
        os._exit(7)
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
end_as(wait_for(child))
"""


@pytest.mark.parametrize("how", ["exit", "SIGTERM", "SIGKILL"])
def test_a_process_ends_as_its_child_did(how):
    """A keeper whose candidate was killed with SIGKILL (a timeout kills the tree) used to raise instead: SIGKILL has
    no handler to put back, and the keeper's traceback landed in the candidate's output."""
    done = subprocess.run([sys.executable, "-c", MIRROR, how], capture_output=True, text=True, timeout=60)
    assert done.stderr == "", done.stderr
    expected = 7 if how == "exit" else -getattr(signal, how)
    assert done.returncode == expected, (done.returncode, expected)
