"""The jail of a build: the compilers that read a candidate's sources see only the toolchain, torch, CUDA and the
workspace, and write only the build's folder and the machine's compiler cache.

    argv = jailed_build(["ninja", ...], jail, read=[workspace], write=[folder, caches...], cwd=folder)

A candidate's source is input the compilers follow: `#define P "/home/you/.ssh/id_rsa"` then `#include P` makes
g++ open that file and print its first line in an error, which goes back to the policy. So the build runs in
bubblewrap with a view of its own (bwrap.py: the system's programs and libraries, a few files of /etc, Python and
its packages, CUDA; no /proc of other processes, no network; the workspace read-only and the build's folders
writable, each at its own path) and inside it under the inner layer (Landlock: read-only but the folders it writes;
seccomp), after giving up its capabilities. Nothing it starts outlives it: bubblewrap's PID namespace ends with
the build.

The compiler cache (objects and precompiled headers) stays writable for builds: only the toolchain's programs and
cudagent's own cache step run in a build (never a candidate's code), and no candidate process can read or write the
cache. A compiler that a source could take over would reach it; that is the limit of this layer.
"""

from __future__ import annotations

import os
import sys

from cudagent.boundary.bwrap import View
from cudagent.evaluator.jail.confine import Plan
from cudagent.evaluator.jail.level import Jail

# What a build's processes get of the environment: never the user's keys and tokens (a computed include of
# /proc/self/environ prints the compiler's own environment).
BUILD_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "CXX",
    "CC",
    "CUDAGENT_BUILD_CACHE",
    "CUDAGENT_BUILD_CACHE_DIRECT",
    "CUDAGENT_BUILD_CACHE_MAX_GB",
)


def build_env(extra: dict[str, str], scratch: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in BUILD_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(HOME=scratch, TMPDIR=scratch, PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1")
    env.update(extra)
    return env


def jailed_build(command: list[str], jail: Jail | None, read: list[str], write: list[str], cwd: str) -> list[str]:
    """`command` as it runs in `jail` (the machine's, level.py), reading `read` and writing `write` (cwd among them),
    each at its own path; unchanged where the jail is off."""
    if jail is None or jail.level == "off":
        return list(command)
    if jail.inner != "off":
        plan = Plan(jail.inner, read=list(read), write=list(write))
        entry = [sys.executable, "-s", "-m", "cudagent.evaluator.jail.entry", "--confine", plan.to_json()]
        command = [*entry, "--exec", *command]
    if jail.jailed:
        command = View(read=list(read), write=list(write), devices=False, chdir=cwd).argv(command)
    return command
