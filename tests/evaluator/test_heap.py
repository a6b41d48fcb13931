"""Every process of a CPU evaluation keeps the memory it frees (heap.py): a 64 MB block freed and asked for again
costs no page faults, in the main thread and in any other, in the host and in the children."""

import os
import subprocess
import sys

import pytest

from cudagent.evaluator.heap import KEEP_HEAP
from cudagent.evaluator.jail.process import child_env

BLOCK_PAGES = (64 << 20) // 4096
ALLOCATE_AGAIN = """
import ctypes, resource, sys, threading
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "keep_heap":
    from cudagent.evaluator.heap import keep_heap
    assert keep_heap()
def block():
    p = libc.malloc(64 << 20)
    ctypes.memset(p, 1, 64 << 20)
    libc.free(ctypes.c_void_p(p))
def work():
    block()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        block()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
t = threading.Thread(target=work)  # a thread's own arena maps big blocks whatever mmap_max says: arena_max=1
t.start(); t.join()
"""


def _faults(how: str, env: dict[str, str]) -> int:
    run = subprocess.run([sys.executable, "-c", ALLOCATE_AGAIN, how], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return int(run.stdout)


@pytest.fixture
def plain_env():
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env["PYTHONPATH"] = child_env("/tmp")["PYTHONPATH"]
    return env


def test_without_it_every_block_is_faulted_in_again(plain_env):
    assert _faults("plain", plain_env) >= 4 * BLOCK_PAGES * 0.9  # what the defence-off case looks like here


def test_the_host_of_a_cpu_evaluation_keeps_its_heap(plain_env):
    assert _faults("keep_heap", plain_env) < BLOCK_PAGES // 10


def test_the_children_start_keeping_their_heap(plain_env, tmp_path):
    env = child_env(str(tmp_path))
    assert env["GLIBC_TUNABLES"] == KEEP_HEAP
    assert _faults("plain", plain_env | {"GLIBC_TUNABLES": env["GLIBC_TUNABLES"]}) < BLOCK_PAGES // 10
