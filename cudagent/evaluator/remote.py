"""The evaluator port over HTTP: a client of `cudagent serve` (one service, or a pool of them); where.py makes it.

A RemoteEvaluator is one session on a service: the service keeps the episode's build directory warm. Every call
carries the whole snapshot, so a session lost to an idle expiry or a restarted service is simply opened again and
the call repeated. Connection losses and "busy" answers are retried with backoff for up to `retry_window_s`; after
that the call raises EvaluatorUnavailable (the tool call fails, the episode goes on). Each call opens its own HTTP
session, so a port can be used from any event loop (optimize runs several), and many ports share one loop.
"""

from __future__ import annotations

import asyncio
import base64
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import aiohttp

from cudagent.errors import CudagentError, EnvironmentProblem
from cudagent.evaluator.port import EvaluatorUnavailable, Snapshot, SnapshotError, snapshot_digest
from cudagent.evaluator.toolchain.extension import BuildResult
from cudagent.evaluator.verdict import Verdict
from cudagent.task import Task

API = "/v1"  # the service's routes (serve/service.py) are under this prefix
RETRYABLE = {"BUSY", "WORKER_RESTARTING", "EVALUATOR_FAULT"}


class RemoteRefused(CudagentError):
    """The service refused a request for a reason retrying cannot fix (a bad token, a bad task, bad files)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code = status, code
        if status in (401, 403):
            self.exit_code = EnvironmentProblem.exit_code


def check_url(url: str) -> str:
    """The service's base URL, normalized; one sentence if it cannot be one."""
    url = url.strip().rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise CudagentError(
            f"the evaluator URL {url!r} needs a scheme and a host, e.g. http://gpu-host:8765 (what cudagent serve "
            "printed)"
        )
    return url.removesuffix(API)


def token_from(environ, home: Path) -> str | None:
    """CUDAGENT_EVALUATOR_TOKEN, else the token a service on this machine wrote."""
    token = environ.get("CUDAGENT_EVALUATOR_TOKEN")
    if token:
        return token.strip()
    default = home / "serve-token"
    return default.read_text().strip() if default.is_file() else None


@dataclass
class EvaluatorPool:
    """One or more services; a new session goes to the one with the fewest sessions open from here."""

    urls: list[str]
    token: str
    retry_window_s: float = 180.0
    request_timeout_s: float = 6 * 3600.0
    open_sessions: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        self.urls = [check_url(u) for u in self.urls]
        if not self.urls:
            raise CudagentError("give at least one evaluator URL")
        if not self.token:
            raise CudagentError(
                "the evaluator service needs its token: set CUDAGENT_EVALUATOR_TOKEN to what cudagent serve "
                "printed (or wrote to its serve-token file)"
            )
        self.open_sessions = {u: 0 for u in self.urls}

    def pick(self) -> str:
        return min(self.urls, key=lambda u: (self.open_sessions[u], random.random()))

    def port(self, task: Task) -> RemoteEvaluator:
        return RemoteEvaluator(self, task)

    def where(self) -> dict:
        return {"urls": self.urls}

    async def check(self) -> None:
        for url in self.urls:
            await self.info(url)

    async def info(self, url: str | None = None) -> dict:
        """The service's /v1/info (fails at once when nothing answers: a newcomer's typo must not wait)."""
        return await _request(self, url or self.urls[0], "GET", "/info", None, retry_window_s=0)


class RemoteEvaluator:
    """One episode's session on a service, behind the evaluator port."""

    def __init__(self, pool: EvaluatorPool, task: Task):
        self.pool, self.task = pool, task
        self.url: str | None = None
        self.session: str | None = None
        self._described: dict | None = None
        self.last_work: dict | None = None  # the service's account of the last evaluation (wait, work, window)
        self._lock = asyncio.Lock()

    # ----- the port ---------------------------------------------------------------------------------------------

    async def open(self, fail_fast: bool = False, retry_window_s: float | None = None) -> None:
        """Open the session. `fail_fast` (a new run, before anything exists): a refused connection fails at once."""
        retry_window_s = 0 if fail_fast else retry_window_s
        url = self.pool.pick()
        body = {"task": {"name": self.task.name, "source": self.task.source}}
        reply = await _request(self.pool, url, "POST", "/sessions", body, retry_window_s=retry_window_s)
        self._forget()
        self.url, self.session = url, reply["session"]
        self.pool.open_sessions[url] += 1
        self._described = reply["describe"]

    async def build(self, snapshot: Snapshot) -> BuildResult:
        reply = await self._call("build", {"files": encode_snapshot(snapshot)}, snapshot)
        return BuildResult.from_dict(reply["build"])

    async def evaluate(self, snapshot: Snapshot, timing: bool, fresh: bool = False) -> Verdict:
        body = {"files": encode_snapshot(snapshot), "timing": timing, "fresh": fresh}
        reply = await self._call("evaluate", body, snapshot)
        self.last_work = reply.get("work")
        return Verdict.from_dict(reply["verdict"])

    def describe(self) -> dict:
        if self._described is None:
            raise RuntimeError("open() the remote evaluator first")
        return {"env": self._described["env"], "baselines": self._described.get("baselines")}

    def device(self) -> dict:
        """The remote device's facts (DeviceInfo as a dict), for a run's header."""
        return dict(self._described.get("device") or {}) if self._described else {}

    async def close(self) -> None:
        if self.session is None:
            return
        try:
            await _request(self.pool, self.url, "DELETE", f"/sessions/{self.session}", None, retry_window_s=0)
        except (CudagentError, EvaluatorUnavailable):
            pass  # the service forgets it when idle
        self._forget()

    # ----- helpers ----------------------------------------------------------------------------------------------

    def _forget(self) -> None:
        if self.session is not None and self.url in self.pool.open_sessions:
            self.pool.open_sessions[self.url] -= 1
        self.session = None

    async def _call(self, action: str, body: dict, snapshot: Snapshot) -> dict:
        """A session call; the session is opened again if the service lost it (expiry, restart)."""
        async with self._lock:
            deadline = time.monotonic() + self.pool.retry_window_s
            for _ in range(5):
                if self.session is None:
                    await self.open(retry_window_s=max(0.0, deadline - time.monotonic()))
                try:
                    reply = await _request(
                        self.pool,
                        self.url,
                        "POST",
                        f"/sessions/{self.session}/{action}",
                        body,
                        retry_window_s=max(0.0, deadline - time.monotonic()),
                    )
                except RemoteRefused as exc:
                    if exc.code in ("BAD_SNAPSHOT", "TOO_LARGE"):
                        raise SnapshotError(str(exc.message).removeprefix("the evaluator service refused: ")) from None
                    if exc.code != "SESSION_UNKNOWN":
                        raise
                    self._forget()
                    continue
                if reply.get("digest") != snapshot_digest(snapshot):
                    raise EvaluatorUnavailable(
                        f"the evaluator service at {self.url} answered about other files than those sent; "
                        "nothing was judged"
                    )
                return reply
            raise EvaluatorUnavailable(f"the evaluator service at {self.url} keeps losing this episode's session")


async def _request(pool: EvaluatorPool, url: str, method: str, path: str, body, retry_window_s=None) -> dict:
    """One API call, retried on connection loss and retryable refusals (honouring Retry-After) for the window."""
    window = pool.retry_window_s if retry_window_s is None else retry_window_s
    deadline = time.monotonic() + window
    headers = {"Authorization": f"Bearer {pool.token}"}
    timeout = aiohttp.ClientTimeout(total=pool.request_timeout_s, connect=30)
    delay = 0.5
    while True:
        try:
            async with aiohttp.ClientSession(timeout=timeout) as http:
                async with http.request(method, f"{url}{API}{path}", json=body, headers=headers) as resp:
                    try:
                        data = await resp.json(content_type=None)
                    except ValueError:
                        data = None
                    if resp.status == 200 and isinstance(data, dict):
                        return data
                    error = (data or {}).get("error") if isinstance(data, dict) else None
                    if not isinstance(error, dict):
                        error = {"code": "HTTP_ERROR", "message": f"{url} answered HTTP {resp.status}, not JSON"}
                    code, message = str(error.get("code")), str(error.get("message"))
                    if resp.status not in (502, 503, 504) and code not in RETRYABLE:
                        raise RemoteRefused(resp.status, code, f"the evaluator service refused: {message}")
                    why = message
                    wait = float(resp.headers.get("Retry-After") or delay)
        except aiohttp.ClientConnectorError as exc:
            why, wait = f"nothing answers at {url} ({exc.os_error or exc})", delay
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
            why, wait = f"the connection to {url} was lost ({type(exc).__name__})", delay
        left = deadline - time.monotonic()
        if left <= 0:
            hint = " (is `cudagent serve` running there?)" if "nothing answers" in why else ""
            waited = f" after retrying for {window:.0f} s" if window > 0 else ""
            raise EvaluatorUnavailable(f"the evaluator service is unavailable{waited}: {why}{hint}")
        await asyncio.sleep(min(wait, left) * (0.8 + 0.4 * random.random()))
        delay = min(delay * 2, 10.0)


def encode_snapshot(snapshot: Snapshot) -> dict[str, str]:
    """A snapshot as JSON carries it: {path: base64 contents}."""
    return {path: base64.b64encode(data).decode("ascii") for path, data in sorted(snapshot.items())}
