"""`cudagent optimize` (run or resume the agent) and `cudagent doctor` (is this machine ready?)."""

from __future__ import annotations

import json
import shutil
import subprocess
from enum import Enum
from pathlib import Path

import typer

from cudagent.cli import app
from cudagent.cli.check import DeviceChoice
from cudagent.errors import CudagentError, ExitCode

ENV_HELP = (
    "Environment: OPENAI_BASE_URL (the server, e.g. http://localhost:8000/v1 for vLLM), OPENAI_API_KEY, "
    "CUDAGENT_HOME (where runs are kept, default ~/.local/share/cudagent), CUDAGENT_CACHE_DIR (builds, baselines), "
    "CUDAGENT_PRICE_INPUT / CUDAGENT_PRICE_OUTPUT (dollars per million tokens, to report cost)."
)
OPTIMIZE_EXIT = (
    "Exit codes: 0 the run ended normally (finish or a limit), whatever it found; 2 bad task file or options; "
    "3 environment problem (no GPU for --device cuda, model server unreachable or unusable, --sandbox bwrap where "
    "bubblewrap cannot run); 130 interrupted "
    "(resume with --resume)."
)
MODEL_PANEL = "Model server"


class SandboxChoice(str, Enum):
    auto = "auto"
    bwrap = "bwrap"
    limits = "limits"
    none = "none"


LIMIT_PANEL = "Limits"


@app.command(
    epilog="Examples:\n\n"
    "  OPENAI_BASE_URL=http://localhost:8000/v1 cudagent optimize model.py\n\n"
    "  cudagent optimize examples/tasks/softmax.py --model gpt-5 --max-turns 60 --json\n\n"
    "  cudagent optimize --resume last\n\n" + ENV_HELP + "\n\n" + OPTIMIZE_EXIT
)
def optimize(
    task: Path = typer.Argument(None, help="The task file (Model, get_inputs, get_init_inputs). Not with --resume."),
    model: str = typer.Option(None, help="Model name; default: the server's first model.", rich_help_panel=MODEL_PANEL),
    base_url: str = typer.Option(
        None, help="OpenAI-compatible endpoint; default $OPENAI_BASE_URL.", rich_help_panel=MODEL_PANEL
    ),
    api_key: str = typer.Option(
        None, help="API key; default $OPENAI_API_KEY (local servers need none).", rich_help_panel=MODEL_PANEL
    ),
    action_format: str = typer.Option(
        None,
        help="How the model calls tools: auto, required (native tool calls) or text (fenced action blocks); "
        "default: probe the server.",
        rich_help_panel=MODEL_PANEL,
    ),
    temperature: float = typer.Option(
        None, help="Sampling temperature; default: the server's.", rich_help_panel=MODEL_PANEL
    ),
    reply_tokens: int = typer.Option(
        None, help="Most tokens of one reply; default: the server's.", rich_help_panel=MODEL_PANEL
    ),
    request_timeout: float = typer.Option(
        None,
        help="Seconds to wait for one reply of the server before retrying it [default: 600].",
        rich_help_panel=MODEL_PANEL,
    ),
    max_turns: int = typer.Option(
        None, help="Most turns (model replies) of the run (default 200).", rich_help_panel=LIMIT_PANEL
    ),
    max_minutes: float = typer.Option(None, help="Wall-clock limit of the run.", rich_help_panel=LIMIT_PANEL),
    max_tokens: int = typer.Option(
        None, help="Most prompt plus completion tokens of the run.", rich_help_panel=LIMIT_PANEL
    ),
    patience: int = typer.Option(
        None, help="End after this many turns without a better verified kernel.", rich_help_panel=LIMIT_PANEL
    ),
    target_speedup: float = typer.Option(
        None,
        help="End once the best kernel is this much faster than torch.compile (e.g. 1.5).",
        rich_help_panel=LIMIT_PANEL,
    ),
    max_format_errors: int = typer.Option(
        None,
        help="End after this many replies in a row with no usable action (default 5).",
        rich_help_panel=LIMIT_PANEL,
    ),
    context_tokens: int = typer.Option(
        None, help="The model's context window; default: what the server says, else 32768.", rich_help_panel=LIMIT_PANEL
    ),
    device: DeviceChoice = typer.Option(DeviceChoice.auto, help="The GPU (CUDA kernels) or the CPU (C++ kernels)."),
    as_json: bool = typer.Option(
        False, "--json", help="Stream JSON events on stdout, one per line, ending with a summary object."
    ),
    resume: str = typer.Option(None, help="Continue run RUN (an id, a prefix, or `last`) where it stopped."),
    final_check: bool = typer.Option(
        True, "--final-check/--no-final-check", help="Re-evaluate the best kernel from pristine files at the end."
    ),
    sandbox: SandboxChoice = typer.Option(
        None,
        help="Confinement of the agent's shell: bwrap (bubblewrap), limits (resource limits only), none (unconfined, "
        "with a warning); default auto: bwrap where it runs, else limits. A resumed run keeps its own.",
        show_default=False,
    ),
) -> None:
    """Run the agent on a task: it writes kernels, compiles, verifies and profiles them, and commits every turn to
    the branch cudagent/<run-id>; the best verified kernel is tagged cudagent/<run-id>/best."""
    from cudagent.agent.loop import Limits
    from cudagent.agent.runner import PolicySettings, RunOptions, resume_run, start_run
    from cudagent.agent.ui import reporter_for

    if action_format is not None and action_format not in ("auto", "required", "text"):
        raise typer.BadParameter("use auto, required or text", param_hint="--action-format")
    if (task is None) == (resume is None):
        raise CudagentError("give a task file to start a run, or --resume RUN to continue one (not both)")
    overrides = {
        "max_turns": max_turns,
        "max_minutes": max_minutes,
        "max_tokens": max_tokens,
        "patience": patience,
        "target_speedup": target_speedup,
        "max_format_errors": max_format_errors,
        "context_tokens": context_tokens,
    }
    if request_timeout is not None and request_timeout <= 0:
        raise typer.BadParameter("must be positive", param_hint="--request-timeout")
    if reply_tokens is not None and reply_tokens <= 0:
        raise typer.BadParameter("must be positive", param_hint="--reply-tokens")
    for name, value in overrides.items():
        if value is not None and value <= 0:
            raise typer.BadParameter("must be positive", param_hint=f"--{name.replace('_', '-')}")
    settings = PolicySettings(
        base_url=base_url,
        api_key=api_key,
        model=model,
        mode=action_format,
        temperature=temperature,
        max_tokens=reply_tokens,
        timeout_s=request_timeout,
    )
    options = RunOptions(
        device=device.value, final_evaluation=final_check, sandbox=sandbox.value if sandbox is not None else None
    )
    reporter = reporter_for(as_json)
    try:
        if resume is not None:
            summary = resume_run(resume, settings, options, overrides, reporter)
        else:
            if not task.is_file():
                raise CudagentError(f"the task file {task} does not exist; give the path of a KernelBench-style .py")
            options.limits = Limits(**{k: v for k, v in overrides.items() if v is not None})
            summary = start_run(task, settings, options, reporter)
    except KeyboardInterrupt:
        reporter.close()
        typer.echo("cudagent: interrupted; continue with `cudagent optimize --resume last`", err=True)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    finally:
        reporter.close()
    reporter.summary(summary)
    code = ExitCode.ENVIRONMENT if summary["exit_reason"] == "policy_error" else ExitCode.OK
    if code != ExitCode.OK:
        typer.echo(
            f"cudagent: the model server failed: {summary['error']}; resume with "
            f"`cudagent optimize --resume {summary['run_id']}`",
            err=True,
        )
    raise typer.Exit(int(code))


@app.command(epilog=ENV_HELP + "\n\nExit code 0 when everything a run needs is there, 3 when something is missing.")
def doctor(
    base_url: str = typer.Option(None, help="The model server to check; default $OPENAI_BASE_URL."),
    model: str = typer.Option(None, help="The model to check; default: the server's first."),
    device: DeviceChoice = typer.Option(DeviceChoice.auto, help="Check for a GPU run or a CPU run."),
    skip_server: bool = typer.Option(False, "--no-server", help="Do not check a model server."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Check the GPU, nvcc, ninja, the C++ compiler, torch and the model server (with its tool-call support)."""
    checks = _doctor_checks(device.value, None if skip_server else (base_url, model))
    if as_json:
        typer.echo(json.dumps({"ok": all(c["ok"] or not c["needed"] for c in checks), "checks": checks}))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="cudagent doctor")
        for col in ("check", "status", "detail"):
            table.add_column(col)
        for c in checks:
            status = (
                "[green]ok[/green]" if c["ok"] else ("[red]missing[/red]" if c["needed"] else "[yellow]no[/yellow]")
            )
            table.add_row(c["name"], status, c["detail"])
        Console().print(table)
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
    from cudagent.agent.sandbox import bwrap_problem

    problem = bwrap_problem()
    add(
        "shell sandbox",
        problem is None,
        "bubblewrap works: the agent's shell is confined"
        if problem is None
        else f"{problem}; the agent's shell will run with resource limits only (see the README's security section)",
        needed=False,
    )
    if server is not None:
        checks.extend(_server_checks(*server))
    return checks


def _server_checks(base_url: str | None, model: str | None) -> list[dict]:
    from cudagent.agent.openai_policy import OpenAIChatPolicy
    from cudagent.agent.policy import PolicyError

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
