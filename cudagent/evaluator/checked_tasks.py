"""A task's check, once per machine: the task loads, runs and is deterministic (task.validate_task), and which null
candidates pass it (audit/nullcheck.py). Neither depends on a candidate, so, like the baselines, the outcome of a
task that passed is kept in the trusted cache, keyed by the task's text, the device and torch build, the tolerance
and this check's version; every later evaluator of the same task on the machine (each `cudagent check`, each run of
the agent, each test) reads it instead of running the task again: seconds of the task's own calls each time.

A task that failed its check is never kept (it is checked, and refused, every time), and a task served by a client
(`cudagent serve`, a HostedTask) is not either: its code is not trusted to behave the same way twice.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict

from cudagent.resources import cache_dir
from cudagent.resultlog import write_json_atomic

VERSION = "1"


def _path(task, device, tolerance) -> str:
    key = json.dumps([task.sha256, device.cache_key(), asdict(tolerance) if tolerance else None, VERSION])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return os.path.join(cache_dir(), "checked-tasks", f"{task.name}-{digest}.json")


def recall(task, device, tolerance) -> list[str] | None:
    """The null candidates that passed this task when it was checked on this machine; None if it was not."""
    try:
        with open(_path(task, device, tolerance)) as f:
            nulls = json.load(f)["null_candidates"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return list(nulls) if isinstance(nulls, list) and all(isinstance(n, str) for n in nulls) else None


def remember(task, device, tolerance, nulls: list[str]) -> None:
    """Keep a passed check (written whole or not at all)."""
    path = _path(task, device, tolerance)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json_atomic(path, {"task": task.name, "null_candidates": list(nulls)})
