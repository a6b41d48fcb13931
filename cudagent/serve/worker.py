"""One evaluator worker of `cudagent serve`: the sessions of one GPU (or of the CPU), in a process of its own that
sees only its GPU (CUDA_VISIBLE_DEVICES), answering the front over a Unix socket.

A client's task is someone else's code: this process never executes it. Each session's task lives in a process of
the evaluator's jail (evaluator/task_host.py), which loads it, checks it and runs every reference call; baselines
are timed there too. What a client sends that cannot be used (a bad task, a path no file system takes) is a 4xx for
that client; only a failure of the evaluator itself restarts the worker, and the front opens the sessions it held
again in the new one when their clients come back.

A session is one episode's evaluator port (this machine's, from where.py: its scratch workspace stays, so rebuilds
stay incremental) and expires when idle. Builds run in parallel up to a bound shared with the host's other workers;
up to `--concurrency` evaluations run at once, sharing the GPU, and each timing inside them has the GPU to itself:
the evaluator takes the device share (device/share.py) for every phase, and this worker names the lock, so its
sessions' threads share the device as a bench's processes do. An evaluation that fails inside the evaluator itself
(not a candidate's crash: those are verdicts) answers with an environment error and ends this process, which the
front restarts: a faulty GPU never gives a verdict.

    python -m cudagent.serve.worker --socket PATH --scratch DIR --device cuda [--concurrency N --build-jobs N ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from cudagent.device import share
from cudagent.evaluator.port import SnapshotError, snapshot_digest
from cudagent.evaluator.task_host import HOSTS
from cudagent.serve.wire import WireError, check_task, decode_snapshot
from cudagent.syntax import guard_every_parse


@dataclass
class Session:
    id: str
    task_name: str
    port: object  # this machine's evaluator port
    directory: Path
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0


class Worker:
    def __init__(self, args):
        from cudagent.evaluator.evaluator import EvalOptions
        from cudagent.evaluator.where import evaluators
        from cudagent.settings import Settings

        self.name = args.name
        self.scratch = Path(args.scratch)
        # a client's task is someone else's code: it runs only in the jail, never in this process (task_host.py)
        options = EvalOptions.from_settings(Settings.from_env(), host_task=True)
        HOSTS.limit = max(1, args.task_processes)
        self.evaluators = evaluators(device=args.device, options=options)
        self.device = self.evaluators.device_info
        self.idle_s = args.idle
        # the device share's lock for this worker's sessions (their threads): work shares the GPU, a timing has it alone
        os.environ[share.LOCK_ENV] = str(self.scratch / "device.lock")
        share.observe(self._on_share)
        self.evaluations = asyncio.Semaphore(max(1, args.concurrency))
        self.builds = asyncio.Semaphore(max(1, args.build_jobs))
        self.sessions: dict[str, Session] = {}
        self.failed = False
        self.timed = 0
        self.sharing = 0  # threads holding a share of the device
        self.timing: str | None = None  # who holds it alone
        self.timing_waiting = 0
        self._counts = threading.Lock()

    def _on_share(self, event: str, exclusive: bool, label: str | None) -> None:
        """The device share's account, from the evaluators' threads: counts for /info, timings in the log."""
        with self._counts:
            if not exclusive:
                self.sharing += {"held": 1, "released": -1}.get(event, 0)
                return
            if event == "waiting":
                self.timing_waiting += 1
            elif event == "held":
                self.timing_waiting -= 1
                self.timing = label or "?"
            else:
                self.timing = None
        if event != "waiting":
            self.log(f"{'timing starts:' if event == 'held' else 'timing ends:  '} {label or '(no session)'}")

    def log(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}"
        sys.stderr.write(f"cudagent serve [{self.name}] {stamp} {text}\n")
        sys.stderr.flush()

    # ----- handlers ---------------------------------------------------------------------------------------------

    async def info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "name": self.name,
                "device": self.device.to_dict(),
                "sessions": len(self.sessions),
                "busy": sum(s.busy for s in self.sessions.values()),
                "sharing": self.sharing,
                "timing": self.timing,
                "timing_waiting": self.timing_waiting,
                "timed": self.timed,
                "task_processes": {"limit": HOSTS.limit, "peak": HOSTS.peak},
            }
        )

    async def open_session(self, request: web.Request) -> web.Response:
        from cudagent.errors import CudagentError
        from cudagent.task import load_task

        body = await _json(request)
        sid = body.get("id")
        if not isinstance(sid, str) or not sid or sid in self.sessions:
            raise WireError(400, "BAD_REQUEST", "a new session needs an unused `id`")
        name, source = check_task(body.get("task"))
        directory = self.scratch / sid
        directory.mkdir(parents=True)
        task_file = directory / f"{name.removesuffix('.py')}.py"
        task_file.write_text(source)
        try:
            port = self.evaluators.port(await asyncio.to_thread(load_task, task_file), scratch_root=directory)
            await asyncio.to_thread(port.open_blocking)  # the other sessions go on meanwhile
        except CudagentError as exc:
            shutil.rmtree(directory, ignore_errors=True)
            raise WireError(422, "BAD_TASK", exc.message) from None
        except Exception:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self.sessions[sid] = Session(sid, name, port, directory)
        self.log(f"session {sid[:8]} opened for {name} ({len(self.sessions)} open)")
        return web.json_response({"session": sid, "describe": {**port.describe(), "device": port.device()}})

    async def build(self, request: web.Request) -> web.Response:
        session = self._session(request)
        body = await _json(request)
        snapshot = decode_snapshot(body.get("files"))
        with self._use(session):
            queued = time.monotonic()
            async with self.builds:
                start = time.monotonic()
                result = await self._guarded(session.port.build(snapshot), "build")
        return web.json_response(
            {"build": result.to_dict(), "digest": snapshot_digest(snapshot), "work": _work(queued, start, False)}
        )

    async def evaluate(self, request: web.Request) -> web.Response:
        session = self._session(request)
        body = await _json(request)
        snapshot = decode_snapshot(body.get("files"))
        timing, fresh = bool(body.get("timing")), bool(body.get("fresh"))
        with self._use(session):
            queued = time.monotonic()
            async with self.evaluations:
                start = time.monotonic()
                share.LABEL.set(f"session {session.id[:8]} ({session.task_name})")  # this request's context only
                verdict = await self._guarded(session.port.evaluate(snapshot, timing, fresh), "evaluation")
                self.timed += timing
        return web.json_response(
            {"verdict": verdict.to_dict(), "digest": snapshot_digest(snapshot), "work": _work(queued, start, timing)}
        )

    async def close_session(self, request: web.Request) -> web.Response:
        session = self.sessions.pop(request.match_info["sid"], None)
        if session is not None:
            await self._close(session, "closed by its client")
        return web.json_response({"closed": session is not None})

    # ----- helpers ----------------------------------------------------------------------------------------------

    def _session(self, request: web.Request) -> Session:
        if self.failed:
            raise WireError(503, "WORKER_RESTARTING", f"the evaluator on {self.name} failed and is restarting", 5)
        session = self.sessions.get(request.match_info["sid"])
        if session is None:
            raise WireError(
                404, "SESSION_UNKNOWN", "no such session (it expired when idle, or the service restarted): open one"
            )
        return session

    @contextlib.contextmanager
    def _use(self, session: Session):
        session.busy += 1
        try:
            yield
        finally:
            session.busy -= 1
            session.last_used = time.monotonic()

    async def _guarded(self, work, what: str):
        """Run the port's work; a failure of the evaluator itself ends this worker (restarted by the front). What a
        client sent that cannot be used is a 4xx for that client alone, never a restart."""
        from cudagent.errors import CudagentError

        try:
            return await work
        except SnapshotError as exc:
            raise WireError(400, "BAD_SNAPSHOT", str(exc)) from None
        except CudagentError as exc:
            raise WireError(422, "BAD_TASK", exc.message) from None
        except Exception as exc:  # noqa: BLE001  (never a verdict from an evaluator that failed)
            self.failed = True
            self.log(f"the {what} failed inside the evaluator; this worker stops:\n{traceback.format_exc()}")
            asyncio.get_running_loop().call_later(0.2, os._exit, 70)
            raise WireError(
                503,
                "EVALUATOR_FAULT",
                f"the evaluator on {self.name} failed during the {what} ({type(exc).__name__}); its worker is "
                "restarting: retry the call",
                5,
            ) from None

    async def _close(self, session: Session, why: str) -> None:
        try:
            await session.port.close()
        finally:
            shutil.rmtree(session.directory, ignore_errors=True)
        self.log(f"session {session.id[:8]} {why} ({len(self.sessions)} open)")

    async def reap(self) -> None:
        """Close sessions idle for longer than the expiry (a client that vanished leaves nothing behind)."""
        while True:
            await asyncio.sleep(max(0.2, min(30.0, self.idle_s / 4)))
            now = time.monotonic()
            for sid, s in list(self.sessions.items()):
                if s.busy == 0 and now - s.last_used > self.idle_s:
                    self.sessions.pop(sid, None)
                    await self._close(s, f"expired after {self.idle_s:.0f} s idle")

    async def close_all(self) -> None:
        for sid in list(self.sessions):
            await self._close(self.sessions.pop(sid), "closed: the service is stopping")


def _work(queued: float, start: float, timed: bool) -> dict:
    end = time.monotonic()
    now = time.time()
    return {
        "wait_s": round(start - queued, 4),
        "work_s": round(end - start, 4),
        "started": round(now - (end - start), 4),
        "ended": round(now, 4),
        "timed": timed,
    }


async def _json(request: web.Request) -> dict:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise WireError(400, "BAD_REQUEST", "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise WireError(400, "BAD_REQUEST", "the request body must be a JSON object")
    return body


@web.middleware
async def errors_as_json(request: web.Request, handler):
    try:
        return await handler(request)
    except WireError as exc:
        headers = {"Retry-After": str(int(exc.retry_after_s))} if exc.retry_after_s else None
        return web.json_response(exc.body(), status=exc.status, headers=headers)


def make_app(worker: Worker) -> web.Application:
    app = web.Application(middlewares=[errors_as_json], client_max_size=64 << 20)
    app.router.add_get("/info", worker.info)
    app.router.add_post("/sessions", worker.open_session)
    app.router.add_post("/sessions/{sid}/build", worker.build)
    app.router.add_post("/sessions/{sid}/evaluate", worker.evaluate)
    app.router.add_delete("/sessions/{sid}", worker.close_session)

    async def lifecycle(app):
        reaper = asyncio.create_task(worker.reap())
        yield
        reaper.cancel()
        await worker.close_all()

    app.cleanup_ctx.append(lifecycle)
    return app


def die_with_parent() -> None:
    """A front killed outright (SIGKILL) must not leave its workers holding the GPUs."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before the line above
        sys.exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(prog="cudagent.serve.worker")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--scratch", required=True)
    parser.add_argument("--name", default="gpu0")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--build-jobs", type=int, default=2)
    parser.add_argument("--idle", type=float, default=900.0)
    parser.add_argument("--task-processes", type=int, default=4)
    args = parser.parse_args()
    die_with_parent()
    guard_every_parse()  # the sessions' threads parse candidates at once (syntax.py)
    Path(args.scratch).mkdir(parents=True, exist_ok=True)
    worker = Worker(args)
    worker.log(f"ready on {worker.device.name} ({worker.device.kind})")
    web.run_app(make_app(worker), path=args.socket, print=None, handle_signals=True, access_log=None)


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    main()
