"""The start of every verdict: the candidate's sources, read once and audited before anything runs.

audited(task, device, ws, audit_static, source) -> Verdict      milliseconds; a rejection here ran nothing
"""

from __future__ import annotations

import os
import time

from cudagent.device.info import DeviceInfo
from cudagent.evaluator.audit.kernel_scan import scan_files
from cudagent.evaluator.audit.static_audit import audit_model_new
from cudagent.evaluator.verdict import Verdict
from cudagent.task import Task
from cudagent.workspace import Workspace


def audited(
    task: Task, device: DeviceInfo, ws: Workspace, audit_static: bool = True, source: str | None = None
) -> Verdict:
    """A verdict's start, in this process and before any other starts: fixed files restored, model_new.py present,
    and the static audit of model_new.py (`source`: its text as the evaluation took it) and the kernel sources (off
    only in tests that show a runtime defense holds on its own). A candidate this rejects is judged in
    milliseconds."""
    t0 = time.monotonic()
    v = Verdict(task={"name": task.name, "sha256": task.sha256}, device=device.to_dict())
    restored = ws.ensure_infrastructure(task.source)
    if restored:
        v.notes.append(f"restored fixed files that had been changed or deleted: {', '.join(restored)}")
    v.candidate_format = ws.candidate_format().value
    source = read_candidate(ws) if source is None else source
    if source is None:
        v.reject("NO_MODELNEW", "the workspace has no model_new.py (a file, not a link); write ModelNew there")
        return v
    if audit_static:
        for violation in audit_model_new(source) + scan_files(ws.kernel_sources(), ws.root):
            v.reject(violation.code, violation.message)
    v.seconds["audit"] = round(time.monotonic() - t0, 3)
    return v


def read_candidate(ws: Workspace) -> str | None:
    """model_new.py's text, read once: the text audited is the text handed to the candidate's process. A link is
    not followed (it could name any file this user may read)."""
    try:
        fd = os.open(ws.model_new_py, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read().decode("utf-8", errors="replace")
