"""`cudagent doctor`: is this machine ready for a run?"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import typer

from cudagent.cli.app import app
from cudagent.cli.options import ENV_HELP, device_option
from cudagent.errors import ExitCode


@app.command(epilog=ENV_HELP + "\n\nExit code 0 when everything a run needs is there, 3 when something is missing.")
def doctor(
    base_url: str = typer.Option(None, help="The model server to check; default $OPENAI_BASE_URL."),
    model: str = typer.Option(None, help="The model to check; default: the server's first."),
    device: str = device_option("Check for a GPU run or a CPU run."),
    skip_server: bool = typer.Option(False, "--no-server", help="Do not check a model server."),
    prepare: bool = typer.Option(
        False,
        "--prepare",
        help="Also make what every first evaluation on this machine would otherwise pay for: the link audit's "
        "calibration (an extension built with this toolchain), precompiled torch headers for kernels' C++ units "
        "and, on a GPU, the device's measured peaks. Kept in the cache; about a minute, once.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Check the GPU, nvcc, ninja, the C++ compiler, torch and the model server (with its tool-call support)."""
    checks = _doctor_checks(device, None if skip_server else (base_url, model))
    if prepare and all(c["ok"] or not c["needed"] for c in checks):
        checks.extend(_prepare_machine(device))
    if as_json:
        typer.echo(json.dumps({"ok": all(c["ok"] or not c["needed"] for c in checks), "checks": checks}))
    else:
        from rich.text import Text

        from cudagent.cli.output import print_table

        table = [["check", "status", "detail"]]
        for c in checks:
            status = Text.from_markup(
                "[green]ok[/green]" if c["ok"] else ("[red]missing[/red]" if c["needed"] else "[yellow]no[/yellow]")
            )
            table.append([c["name"], status, c["detail"]])
        print_table(table, "cudagent doctor")
    raise typer.Exit(int(ExitCode.OK if all(c["ok"] or not c["needed"] for c in checks) else ExitCode.ENVIRONMENT))


def _doctor_checks(device: str, server: tuple | None) -> list[dict]:
    import torch

    checks = []

    def add(name, ok, detail, needed=True):
        checks.append({"name": name, "ok": bool(ok), "detail": detail, "needed": needed})

    add("torch", True, torch.__version__)
    cuda = torch.cuda.is_available()
    want_gpu = device == "cuda" or (device == "auto" and cuda)
    if cuda:
        cap = torch.cuda.get_device_capability()
        add("GPU", True, f"{torch.cuda.get_device_name()} (sm_{cap[0]}{cap[1]}), CUDA {torch.version.cuda}")
    else:
        add(
            "GPU", False, "no CUDA GPU visible to torch: only --device cpu (C++ kernels) works", needed=device == "cuda"
        )
    nvcc = shutil.which("nvcc") or (
        Path("/usr/local/cuda/bin/nvcc") if Path("/usr/local/cuda/bin/nvcc").exists() else None
    )
    add(
        "nvcc",
        nvcc is not None,
        _first_line([str(nvcc), "--version"], last=True) if nvcc else "not found",
        needed=want_gpu,
    )
    ninja = shutil.which("ninja")
    if ninja is None:
        try:
            import ninja as ninja_pkg

            ninja = str(Path(ninja_pkg.BIN_DIR) / "ninja")
        except ImportError:
            ninja = None
    add("ninja", ninja is not None, _first_line([ninja, "--version"]) if ninja else "not found: pip install ninja")
    cxx = shutil.which("c++") or shutil.which("g++")
    add("C++ compiler", cxx is not None, _first_line([cxx, "--version"]) if cxx else "not found: install g++")
    from cudagent.boundary.shell import bwrap_problem

    problem = bwrap_problem()
    add(
        "shell sandbox",
        problem is None,
        "bubblewrap works: the agent's shell is confined"
        if problem is None
        else f"{problem}; the agent's shell will run with resource limits only (see docs/security.md)",
        needed=False,
    )
    from cudagent.evaluator.jail import level as jail_level
    from cudagent.evaluator.jail.confine import Unconfined
    from cudagent.settings import Settings

    level = Settings.from_env().confine
    try:
        jail = jail_level.decide(level, "cuda" if want_gpu and cuda else "cpu")
        whole = level != "off" and jail.jailed and jail.inner != "off" and not jail.notes
        why = f" ({'; '.join(jail.notes)})" if jail.notes else ""
        add("candidate jail", whole, f"--confine {level}: {jail.describe()}{why}", needed=level == "strict")
    except Unconfined as exc:
        add("candidate jail", False, f"--confine strict: this machine cannot jail a candidate ({exc})")
    if server is not None:
        checks.extend(_server_checks(*server))
    return checks


def _prepare_machine(device: str) -> list[dict]:
    """The once-per-machine facts of the evaluator, made now (each kept in the cache; made already: milliseconds)."""
    import time

    from cudagent.device.info import resolve_device
    from cudagent.errors import EnvironmentProblem
    from cudagent.evaluator.audit.link_audit import baseline_symbols
    from cudagent.evaluator.timing.peaks import device_peaks
    from cudagent.evaluator.toolchain import pch

    info = resolve_device(device)
    made = []
    steps = [
        ("link-audit calibration", lambda: f"{len(baseline_symbols(info))} symbols a plain extension links"),
        ("precompiled headers", lambda: pch.prepare(info)),
    ]
    if info.is_cuda:
        steps.append(("device peaks", lambda: _peaks_line(device_peaks(info))))
    for name, make in steps:
        start = time.monotonic()
        try:
            detail = make()
            ok = True
        except (EnvironmentProblem, RuntimeError, OSError) as exc:
            detail, ok = str(exc).splitlines()[0][:300], False
        made.append({"name": name, "ok": ok, "detail": f"{detail} ({time.monotonic() - start:.1f} s)", "needed": True})
    return made


def _peaks_line(peaks) -> str:
    rates = f"{peaks.bf16_tflops:.0f} TFLOP/s bf16, " if peaks.bf16_tflops else ""
    return f"{peaks.bandwidth_gbs:.0f} GB/s, {rates}{peaks.fp32_tflops:.0f} TFLOP/s fp32"


def _server_checks(base_url: str | None, model: str | None) -> list[dict]:
    import os

    from cudagent.agent.openai_policy import NO_SERVER, OpenAIChatPolicy
    from cudagent.agent.policy import PolicyError

    if not base_url and not os.environ.get("OPENAI_BASE_URL"):
        return [
            {
                "name": "model server",
                "ok": False,
                "detail": f"{NO_SERVER} (--no-server skips this check)",
                "needed": True,
            }
        ]
    policy = OpenAIChatPolicy(base_url=base_url, model=model, max_attempts=2, timeout_s=60)
    try:
        policy.prepare()
    except PolicyError as exc:
        return [{"name": "model server", "ok": False, "detail": exc.message, "needed": True}]
    tools = {
        "auto": "native tool calls",
        "required": "native tool calls (tool_choice=required only)",
        "text": "no tool calls: the text action format will be used",
    }[policy.mode]
    return [
        {"name": "model server", "ok": True, "detail": f"{policy.base_url}, model {policy.model}", "needed": True},
        {"name": "tool calls", "ok": policy.mode != "text", "detail": tools, "needed": False},
    ]


def _first_line(cmd: list[str], last: bool = False) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot run: {exc}"
    if not out:
        return "?"
    return out[-1] if last else out[0]
