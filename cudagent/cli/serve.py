"""`cudagent serve`: the evaluator as an HTTP service on a GPU host (cudagent.serve)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from cudagent.cli.app import app
from cudagent.cli.options import confine_option
from cudagent.errors import CudagentError, EnvironmentProblem

LIMITS_PANEL = "Limits"


@app.command(
    epilog="Examples:\n\n"
    "  cudagent serve                                    (this machine's GPUs, on 127.0.0.1:8765)\n\n"
    "  cudagent serve --host 0.0.0.0 --gpus 0,1 --token-file /etc/cudagent/token\n\n"
    "  cudagent serve --device cpu                       (C++ kernels, for a machine without a GPU)\n\n"
    "Clients: `cudagent optimize model.py --evaluator http://HOST:8765` with CUDAGENT_EVALUATOR_TOKEN set.\n\n"
    "Exit codes: 0 stopped by SIGINT or SIGTERM; 2 bad options or token file; 3 environment problem (no GPU, a "
    "worker that cannot start, the port taken)."
)
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on; beyond localhost a warning is printed."),
    port: int = typer.Option(8765, help="TCP port."),
    device: str = typer.Option("cuda", help="cuda: one evaluator worker per GPU; cpu: one worker for C++ kernels."),
    confine: str = confine_option(),
    gpus: str = typer.Option(None, help="GPU ids to serve, one worker each, e.g. 0,1 (default: all visible)."),
    token_file: Path = typer.Option(
        None,
        help="A file holding the bearer token clients must send; default: CUDAGENT_HOME/serve-token, made with a "
        "new random token (printed) on first start.",
    ),
    concurrency: int = typer.Option(
        4, help="Verifications at once on one GPU (timing always has the GPU alone).", rich_help_panel=LIMITS_PANEL
    ),
    build_jobs: int = typer.Option(
        None, help="Builds at once on this host (default: a quarter of its cores).", rich_help_panel=LIMITS_PANEL
    ),
    max_queue: int = typer.Option(
        64, help="Requests waiting or running per GPU before the service answers busy.", rich_help_panel=LIMITS_PANEL
    ),
    idle_expiry: float = typer.Option(
        900.0, help="Seconds after which an idle session's build directory is removed.", rich_help_panel=LIMITS_PANEL
    ),
    max_body_mb: float = typer.Option(24.0, help="Largest request body, in MiB.", rich_help_panel=LIMITS_PANEL),
    task_processes: int = typer.Option(
        4,
        help="Jailed processes per GPU that run sessions' tasks (the reference); idle ones make room for others.",
        rich_help_panel=LIMITS_PANEL,
    ),
    max_sessions: int = typer.Option(
        256,
        help="Sessions open at once for the token; beyond it opening one answers 429.",
        rich_help_panel=LIMITS_PANEL,
    ),
) -> None:
    """Serve the evaluator over HTTP: clients elsewhere (`optimize --evaluator URL`, `bench --evaluator URL`) send
    the agent's files; this host builds, verifies and times them on its GPUs and answers with verdicts."""
    from cudagent.serve.service import ServeConfig, is_loopback, load_or_create_token
    from cudagent.serve.service import serve as run_service
    from cudagent.settings import Settings

    if device not in ("cuda", "cpu"):
        raise typer.BadParameter("use cuda or cpu", param_hint="--device")
    bounds = (("concurrency", concurrency), ("max-queue", max_queue), ("idle-expiry", idle_expiry))
    for name, value in (*bounds, ("max-sessions", max_sessions), ("task-processes", task_processes)):
        if value <= 0:
            raise typer.BadParameter("must be positive", param_hint=f"--{name}")
    if not 0 < port < 65536:
        raise typer.BadParameter("must be a TCP port (1-65535)", param_hint="--port")
    gpu_ids = _gpus(gpus) if device == "cuda" else []
    token, made = load_or_create_token(token_file, Settings.from_env().home / "serve-token")
    config = ServeConfig(
        host=host,
        port=port,
        device=device,
        gpus=gpu_ids,
        concurrency=concurrency,
        build_jobs=build_jobs or max(1, (os.cpu_count() or 4) // 4),
        max_queue=max_queue,
        idle_expiry_s=idle_expiry,
        max_body_bytes=int(max_body_mb * (1 << 20)),
        max_sessions=max_sessions,
        task_processes=task_processes,
        token=token,
    )
    say = _say
    if made:
        say(made)
    if not is_loopback(host):
        say(
            f"warning: listening on {host}, beyond this machine: anyone who reaches the port with the token can run "
            "code in this host's evaluator sandbox; keep the token secret and put TLS in front (a reverse proxy)"
        )
    try:
        run_service(config, say)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _gpus(value: str | None) -> list[str]:
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        raise EnvironmentProblem(
            "no CUDA GPU is visible to PyTorch; run `cudagent serve --device cpu` to serve C++ kernels, or start "
            "it on a machine with an NVIDIA GPU"
        )
    ids = [str(i) for i in range(count)] if value is None else [g.strip() for g in value.split(",") if g.strip()]
    bad = [g for g in ids if not g.isdigit() or int(g) >= count]
    if bad or not ids:
        raise CudagentError(f"--gpus {value!r}: give ids among 0..{count - 1}, comma-separated")
    # each worker sees one GPU through CUDA_VISIBLE_DEVICES: name it as this process's own list does
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return [visible[int(i)] if len(visible) == count else i for i in ids]


def _say(text: str) -> None:
    typer.echo(f"cudagent serve: {text}", err=True)
