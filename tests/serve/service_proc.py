"""A real `cudagent serve` process on localhost for the tests: started, killed outright, restarted."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

TOKEN = "tests-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    def __init__(self, directory: Path, *extra: str, port: int | None = None, device: str = "cpu"):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.token_file = directory / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.port = port or free_port()
        self.extra, self.device = list(extra), device
        self.log = directory / "service.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 180) -> ServiceProcess:
        argv = [sys.executable, "-m", "cudagent", "serve", "--device", self.device, "--port", str(self.port)]
        argv += ["--token-file", str(self.token_file), *self.extra]
        env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1")
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cudagent serve exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if self.get("/v1/health", token=None)[1].get("status") == "ok":
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"cudagent serve did not come up:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL to the front and its workers at once (a machine that lost power, an OOM kill)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ----- raw HTTP, for the refusal tests ---------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        token: str | None = TOKEN,
        headers=None,
        timeout_s: float = 600,
    ):
        """`timeout_s` only guards against a hang: a timed evaluation queued behind another on a loaded two-core CI
        machine took 127 s (stop 62's CI failed on the old 120 s here)."""
        req = urllib.request.Request(f"{self.url}{path}", data=body, method=method)
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def get(self, path: str, token: str | None = TOKEN):
        return self.request("GET", path, token=token)

    def post(self, path: str, payload, token: str | None = TOKEN):
        return self.request("POST", path, json.dumps(payload).encode(), token=token)


def timing_windows(log: str) -> list[tuple[str, str, str]]:
    """(start, end, session) of each stretch a worker held its device alone for a timing, from its log lines."""
    starts, spans = {}, []
    for line in log.splitlines():
        m = re.search(r"\] (\d\d:\d\d:\d\d\.\d{3}) timing (starts|ends):\s+session (\w+)", line.replace("-", "_"))
        if not m:
            continue
        stamp, what, sid = m.groups()
        if what == "starts":
            starts[sid] = stamp
        else:
            spans.append((starts.pop(sid), stamp, sid))
    return spans
