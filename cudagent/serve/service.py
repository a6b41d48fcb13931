"""The front of `cudagent serve`: the HTTP API clients see, on aiohttp.

It checks the bearer token, bounds request bodies and each worker's queue, routes a session to the worker of one
GPU (the one with the fewest sessions) and passes requests through to it over a Unix socket. It starts, watches and
restarts the workers; it never builds or runs anything itself, and never runs a command a client sends.

    GET    /v1/health                      no token: {"status": "ok" | "degraded" | "down", "workers_up": n}
    GET    /v1/info                        GPUs, versions, sessions, queue lengths, limits
    POST   /v1/sessions                    {"task": {"name", "source"}} -> {"session", "describe"}
    POST   /v1/sessions/{id}/build         {"files"} -> {"build", "digest", "work"}
    POST   /v1/sessions/{id}/evaluate      {"files", "timing", "fresh"} -> {"verdict", "digest", "work"}
    DELETE /v1/sessions/{id}

Refusals are `{"error": {"code", "message"}}` with an HTTP status; 503 answers carry Retry-After.

It stays one module (about 450 lines): the front's handlers, its worker handles and the middlewares
share the routing table and the limits; the workers live in worker.py, the wire format in wire.py.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.metadata
import ipaddress
import json
import os
import platform
import secrets
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

import cudagent
from cudagent.errors import CudagentError, EnvironmentProblem
from cudagent.evaluator.remote import API
from cudagent.serve.wire import DEFAULT_MAX_BODY_BYTES, WireError
from cudagent.text import counted

WORKER_START_TIMEOUT_S = 300.0


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    device: str = "cuda"  # cuda: one worker per GPU in `gpus`; cpu: one worker for C++ kernels
    gpus: list[str] = field(default_factory=list)
    concurrency: int = 4  # verifications at once per GPU
    build_jobs: int = 2  # builds at once on this host, shared by the workers
    max_queue: int = 64  # requests waiting or running per worker before "busy"
    idle_expiry_s: float = 900.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_sessions: int = 256  # sessions open at once per token (a client that never closes its sessions)
    task_processes: int = 4  # per worker: the jailed processes that hold sessions' tasks (evaluator/task_host.py)
    token: str = ""


def load_or_create_token(token_file: Path | None, default_file: Path) -> tuple[str, str | None]:
    """The service's bearer token, and a line to print when one was made now (first start)."""
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise CudagentError(f"cannot read the token file {token_file}: {exc.strerror}") from None
        if len(token) < 16:
            raise CudagentError(f"the token in {token_file} is shorter than 16 characters; write a longer secret")
        return token, None
    if default_file.is_file():
        return default_file.read_text().strip(), None
    default_file.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(default_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, f"a new token was written to {default_file}; clients send it as CUDAGENT_EVALUATOR_TOKEN: {token}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WorkerHandle:
    """One worker process (one GPU, or the CPU), restarted whenever it exits while the service runs."""

    def __init__(self, name: str, gpu: str | None, config: ServeConfig, root: Path, build_jobs: int):
        self.name, self.gpu, self.config, self.root, self.build_jobs = name, gpu, config, root, build_jobs
        self.socket = str(root / f"{name}.sock")
        self.proc: asyncio.subprocess.Process | None = None
        self.http: aiohttp.ClientSession | None = None
        self.up = False
        self.restarts = 0
        self.pending = 0  # requests passed to it and not yet answered
        self.sessions: set[str] = set()
        self.device: dict | None = None
        self._stopping = False
        self._watch: asyncio.Task | None = None

    async def start(self) -> None:
        self.http = aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=self.socket, limit=0), timeout=aiohttp.ClientTimeout(total=None)
        )
        await self._spawn()
        self._watch = asyncio.create_task(self._supervise())

    async def _spawn(self) -> None:
        scratch = self.root / f"{self.name}-scratch"
        shutil.rmtree(scratch, ignore_errors=True)  # what a dead worker held
        Path(self.socket).unlink(missing_ok=True)
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu
        argv = [
            sys.executable, "-m", "cudagent.serve.worker", "--socket", self.socket, "--scratch", str(scratch),
            "--name", self.name, "--device", self.config.device, "--concurrency", str(self.config.concurrency),
            "--build-jobs", str(self.build_jobs), "--idle", str(self.config.idle_expiry_s),
            "--task-processes", str(self.config.task_processes),
        ]  # fmt: skip
        self.proc = await asyncio.create_subprocess_exec(*argv, env=env, stdin=asyncio.subprocess.DEVNULL)
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.returncode is None:
            try:
                async with self.http.get("http://worker/info") as resp:
                    self.device = (await resp.json())["device"]
                    self.up = True
                    return
            except (aiohttp.ClientError, OSError):
                await asyncio.sleep(0.1)
        why = "no answer in time" if self.proc.returncode is None else f"it exited with status {self.proc.returncode}"
        raise EnvironmentProblem(f"the evaluator worker for {self.name} did not start ({why}); its messages are above")

    async def _supervise(self) -> None:
        while not self._stopping:
            status = await self.proc.wait()
            self.up = False
            self.sessions.clear()
            if self._stopping:
                return
            self.restarts += 1
            _log(f"[{self.name}] the worker exited with status {status}; restarting it (restart {self.restarts})")
            await asyncio.sleep(min(30.0, 0.5 * 2 ** min(self.restarts, 6)))
            try:
                await self._spawn()
            except EnvironmentProblem as exc:
                _log(f"[{self.name}] {exc.message}")

    async def request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes, dict]:
        if not self.up:
            raise WireError(503, "WORKER_RESTARTING", f"the evaluator worker for {self.name} is restarting", 5)
        self.pending += 1
        try:
            async with self.http.request(
                method, f"http://worker{path}", data=body, headers={"Content-Type": "application/json"}
            ) as resp:
                return resp.status, await resp.read(), {k: v for k, v in resp.headers.items() if k == "Retry-After"}
        except (aiohttp.ClientConnectionError, aiohttp.ServerDisconnectedError, OSError):
            raise WireError(
                503,
                "WORKER_RESTARTING",
                f"the evaluator worker for {self.name} stopped during this call and is restarting; retry it",
                5,
            ) from None
        finally:
            self.pending -= 1

    async def own_info(self) -> dict:
        """What the worker says of itself (GET /info), or {} while it is down."""
        try:
            status, data, _ = await self.request("GET", "/info", None)
            return json.loads(data) if status == 200 else {}
        except (WireError, ValueError):
            return {}

    async def stop(self) -> None:
        self._stopping = True
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._watch is not None:
            self._watch.cancel()
        if self.http is not None:
            await self.http.close()


class Service:
    def __init__(self, config: ServeConfig):
        self.config = config
        self.root = Path(tempfile.mkdtemp(prefix="cudagent-serve-"))
        os.chmod(self.root, 0o700)
        slots = config.gpus if config.device == "cuda" else [None]
        per_worker = max(1, -(-config.build_jobs // len(slots)))
        self.workers = [
            WorkerHandle(f"gpu{g}" if g is not None else "cpu", g, config, self.root, per_worker) for g in slots
        ]
        self.routes: dict[str, tuple[WorkerHandle, float]] = {}
        self.opened: dict[str, bytes] = {}  # each open session's request, to open it again in a restarted worker
        self.started = time.time()

    # ----- lifecycle --------------------------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.gather(*(w.start() for w in self.workers))
        self._reaper = asyncio.create_task(self._forget_idle_routes())

    async def stop(self) -> None:
        self._reaper.cancel()
        await asyncio.gather(*(w.stop() for w in self.workers), return_exceptions=True)
        shutil.rmtree(self.root, ignore_errors=True)

    async def _forget_idle_routes(self) -> None:
        while True:
            await asyncio.sleep(max(0.2, min(30.0, self.config.idle_expiry_s / 4)))
            cutoff = time.monotonic() - self.config.idle_expiry_s - 5
            for sid, (worker, used) in list(self.routes.items()):
                if used < cutoff and worker.pending == 0:
                    self._forget(sid)

    # ----- handlers ---------------------------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        up = sum(w.up for w in self.workers)
        status = "ok" if up == len(self.workers) else "degraded" if up else "down"
        return web.json_response({"status": status, "workers_up": up, "workers": len(self.workers)})

    async def info(self, request: web.Request) -> web.Response:
        own = {w.name: await w.own_info() for w in self.workers}
        return web.json_response(
            {
                "cudagent": cudagent.__version__,
                "torch": _version("torch"),
                "aiohttp": aiohttp.__version__,
                "python": platform.python_version(),
                "uptime_s": round(time.time() - self.started, 1),
                "workers": [
                    {
                        "name": w.name,
                        "gpu": w.gpu,
                        "up": w.up,
                        "device": w.device,
                        "sessions": len(w.sessions),
                        "queue": w.pending,
                        "restarts": w.restarts,
                        "task_processes": own[w.name].get("task_processes"),
                    }
                    for w in self.workers
                ],
                "queue": sum(w.pending for w in self.workers),
                "limits": {
                    "max_queue_per_worker": self.config.max_queue,
                    "verifications_per_gpu": self.config.concurrency,
                    "build_jobs": self.config.build_jobs,
                    "idle_expiry_s": self.config.idle_expiry_s,
                    "max_body_bytes": self.config.max_body_bytes,
                    "max_sessions_per_token": self.config.max_sessions,
                    "task_processes_per_worker": self.config.task_processes,
                },
            }
        )

    async def open_session(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            parsed = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise WireError(400, "BAD_REQUEST", "the request body is not JSON") from None
        if not isinstance(parsed, dict):
            raise WireError(400, "BAD_REQUEST", "the request body must be a JSON object")
        if len(self.opened) >= self.config.max_sessions:  # one token: the cap is the token's
            raise WireError(
                429,
                "TOO_MANY_SESSIONS",
                f"this token has {len(self.opened)} sessions open (the bound is {self.config.max_sessions}); close "
                "the ones you no longer use (DELETE), or wait for idle ones to expire",
                30,
            )
        sid = secrets.token_urlsafe(16)
        forwarded = json.dumps({"id": sid, "task": parsed.get("task")}).encode()
        status, data, headers = await self._open(sid, forwarded)
        if status == 200:
            self.opened[sid] = forwarded
        return web.Response(status=status, body=data, headers=headers, content_type="application/json")

    async def _open(self, sid: str, forwarded: bytes) -> tuple[int, bytes, dict]:
        live = [w for w in self.workers if w.up]
        if not live:
            raise WireError(503, "WORKER_RESTARTING", "no evaluator worker is up; they are restarting", 5)
        worker = min(live, key=lambda w: (len(w.sessions), w.pending))
        self._check_queue(worker)
        status, data, headers = await worker.request("POST", "/sessions", forwarded)
        if status == 200:
            self.routes[sid] = (worker, time.monotonic())
            worker.sessions.add(sid)
        return status, data, headers

    async def session_call(self, request: web.Request) -> web.Response:
        sid, action = request.match_info["sid"], request.match_info["action"]
        worker = self._route(sid)
        self._check_queue(worker)
        body = await request.read()
        status, data, headers = await worker.request("POST", f"/sessions/{sid}/{action}", body)
        if status == 404 and sid in self.opened:  # its worker restarted since: the session is opened there again
            _log(f"session {sid[:8]} lost with a worker restart; opening it again")
            status, data, headers = await self._open(sid, self.opened[sid])
            if status == 200:
                worker = self.routes[sid][0]
                status, data, headers = await worker.request("POST", f"/sessions/{sid}/{action}", body)
        self.routes[sid] = (worker, time.monotonic())
        if status == 404:
            self._forget(sid)
        return web.Response(status=status, body=data, headers=headers, content_type="application/json")

    async def close_session(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        worker = self._route(sid)
        self._forget(sid)
        status, data, headers = await worker.request("DELETE", f"/sessions/{sid}", None)
        return web.Response(status=status, body=data, headers=headers, content_type="application/json")

    # ----- helpers ----------------------------------------------------------------------------------------------

    def _route(self, sid: str) -> WorkerHandle:
        route = self.routes.get(sid)
        if route is None:
            raise WireError(
                404, "SESSION_UNKNOWN", "no such session (it expired when idle, or the service restarted): open one"
            )
        return route[0]

    def _forget(self, sid: str) -> None:
        self.opened.pop(sid, None)
        route = self.routes.pop(sid, None)
        if route is not None:
            route[0].sessions.discard(sid)

    def _check_queue(self, worker: WorkerHandle) -> None:
        if worker.pending >= self.config.max_queue:
            raise WireError(
                503,
                "BUSY",
                f"{worker.name} has {worker.pending} requests waiting or running (the bound is "
                f"{self.config.max_queue}); retry after a few seconds",
                max(1, min(30, worker.pending // max(1, self.config.concurrency))),
            )

    # ----- the application --------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(
            middlewares=[self._errors_as_json, self._authenticate], client_max_size=self.config.max_body_bytes
        )
        app.router.add_get(f"{API}/health", self.health)
        app.router.add_get(f"{API}/info", self.info)
        app.router.add_post(f"{API}/sessions", self.open_session)
        app.router.add_post(f"{API}/sessions/{{sid}}/{{action:build|evaluate}}", self.session_call)
        app.router.add_delete(f"{API}/sessions/{{sid}}", self.close_session)

        async def lifecycle(app):
            await self.start()
            yield
            await self.stop()

        app.cleanup_ctx.append(lifecycle)
        return app

    @web.middleware
    async def _authenticate(self, request: web.Request, handler):
        if request.path == f"{API}/health":
            return await handler(request)
        header = request.headers.get("Authorization", "")
        if not header:
            raise WireError(401, "NO_TOKEN", "send the service's token as `Authorization: Bearer <token>`")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.config.token.encode()):
            raise WireError(403, "BAD_TOKEN", "the token is not this service's; use the one `cudagent serve` wrote")
        return await handler(request)

    @web.middleware
    async def _errors_as_json(self, request: web.Request, handler):
        try:
            return await handler(request)
        except WireError as exc:
            return _error(exc)
        except web.HTTPRequestEntityTooLarge:
            return _error(
                WireError(413, "TOO_LARGE", f"the request is over the {self.config.max_body_bytes}-byte limit")
            )
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status, "HTTP_ERROR")
            return _error(WireError(exc.status, code, f"{request.method} {request.path}: {exc.reason}"))
        except Exception:  # noqa: BLE001  (a bug here answers with a sentence, never a traceback)
            _log(f"internal error on {request.method} {request.path}:\n{traceback.format_exc()}")
            return _error(WireError(500, "INTERNAL", "the service failed on this request; its log says why"))


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _error(exc: WireError) -> web.Response:
    headers = {"Retry-After": str(int(exc.retry_after_s))} if exc.retry_after_s else None
    return web.json_response(exc.body(), status=exc.status, headers=headers)


def _log(text: str) -> None:
    sys.stderr.write(f"cudagent serve {text}\n")
    sys.stderr.flush()


def serve(config: ServeConfig, announce) -> None:
    """Run the service until SIGINT or SIGTERM; `announce(text)` tells the user where it listens."""
    service = Service(config)

    async def ready(app):
        announce(
            f"listening on http://{config.host}:{config.port}{API} with {counted(len(service.workers), 'worker')}: "
            + ", ".join(f"{w.name} ({(w.device or {}).get('name', '?')})" for w in service.workers)
        )

    app = service.app()
    app.cleanup_ctx.append(_announce_after_start(ready))  # after the workers are up
    web.run_app(app, host=config.host, port=config.port, print=None, access_log=None, handle_signals=True)


def _announce_after_start(ready):
    async def ctx(app):
        await ready(app)
        yield

    return ctx
