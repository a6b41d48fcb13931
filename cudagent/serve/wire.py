"""What travels between a client (evaluator/remote.py), the service's front and its workers: JSON bodies, snapshots
as base64, errors as `{"error": {"code", "message"}}` with an HTTP status. Every verdict names the digest of the
snapshot it judged (port.snapshot_digest), so a client can prove the answer is about the files it sent."""

from __future__ import annotations

import base64
import binascii
import re

from cudagent.evaluator.port import Snapshot, SnapshotError, check_snapshot

TOKEN_HEADER = "Authorization"
MAX_TASK_SOURCE_BYTES = 1 << 20
# A snapshot may hold 16 MiB (port.MAX_SNAPSHOT_BYTES); base64 and JSON add a third.
DEFAULT_MAX_BODY_BYTES = 24 << 20
_TASK_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


class WireError(Exception):
    """A request the service refuses: an HTTP status, a code and one sentence for the user."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after_s = status, code, message, retry_after_s

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message}}


def decode_snapshot(files: object) -> Snapshot:
    """The snapshot a request carries, checked as the port checks it (paths an agent owns, a size bound)."""
    if not isinstance(files, dict):
        raise WireError(400, "BAD_REQUEST", "`files` must be an object of {path: base64 contents}")
    snapshot: Snapshot = {}
    for path, data in files.items():
        if not isinstance(path, str) or not isinstance(data, str):
            raise WireError(400, "BAD_REQUEST", "`files` must map path strings to base64 strings")
        try:
            snapshot[path] = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise WireError(400, "BAD_REQUEST", f"the contents of {path!r} are not valid base64") from None
    try:
        check_snapshot(snapshot)
    except SnapshotError as exc:
        raise WireError(400, "BAD_SNAPSHOT", str(exc)) from None
    return snapshot


def check_task(task: object) -> tuple[str, str]:
    """The (name, source) of a session's task."""
    if not isinstance(task, dict) or not isinstance(task.get("name"), str) or not isinstance(task.get("source"), str):
        raise WireError(400, "BAD_REQUEST", "`task` must be an object with a `name` and the reference's `source`")
    name, source = task["name"], task["source"]
    if not _TASK_NAME.match(name):
        raise WireError(400, "BAD_REQUEST", f"the task name {name!r} must be letters, digits, '_', '.' or '-'")
    if len(source.encode()) > MAX_TASK_SOURCE_BYTES:
        raise WireError(413, "TOO_LARGE", f"the task's source is over {MAX_TASK_SOURCE_BYTES} bytes")
    return name, source
