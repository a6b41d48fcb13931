"""`cudagent optimize`: run or resume the agent, on a task (an episode) or on a model of your own (a model run).

About 440 lines, most of them the command's options: its three kinds of run (a task with a chat policy or a
replay, token mode, a model run) and their resumption share those options and their checks, which is why they stay
in one command module (command modules may not import each other: tests/test_layout.py)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from cudagent.cli.app import app
from cudagent.cli.options import (
    ENV_HELP,
    confine_option,
    device_option,
    dtype_option,
    evaluator_urls,
    model_option,
)
from cudagent.errors import CudagentError, EvaluatorUnusable, ExitCode, Terminated
from cudagent.syntax import parse

OPTIMIZE_EXIT = (
    "Exit codes: 0 the run ended normally (finish or a limit), whatever it found; 2 bad task file or options; "
    "3 environment problem (no GPU for --device cuda, model server unreachable or unusable, --sandbox bwrap where "
    "bubblewrap cannot run); 130 interrupted (SIGINT), 143 terminated (SIGTERM): resume with --resume."
)
MODEL_PANEL = "Model server"
USER_PANEL = "Your own model (not a KernelBench task)"


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
    "  cudagent optimize model.py:Block --inputs 'x=f32[8,512,768]' --top 3\n\n"
    "  cudagent optimize --resume last\n\n" + ENV_HELP + "\n\n" + OPTIMIZE_EXIT
)
def optimize(
    task: str = typer.Argument(
        None,
        help="A KernelBench task file (Model, get_inputs, get_init_inputs), or your model: model.py:Block (or "
        "model.py when it defines one module class). Not with --resume.",
        show_default=False,
    ),
    module: str = model_option("module", USER_PANEL),
    inputs: str = model_option("inputs", USER_PANEL),
    init: str = model_option("init", USER_PANEL),
    example: Path = model_option("example", USER_PANEL),
    hf: Path = model_option("hf", USER_PANEL),
    top: int = typer.Option(
        3,
        help="How many hot spots of your model to optimize (alike modules that one task serves count once).",
        rich_help_panel=USER_PANEL,
    ),
    keep_slower: bool = typer.Option(
        False,
        "--keep-slower",
        help="Put back verified kernels that are not faster than the module they replace too (by default only "
        "kernels that beat it, reward tier 2 or 3, go into the model).",
        rich_help_panel=USER_PANEL,
    ),
    by: str = typer.Option(
        "regions",
        help="How your model is cut into tasks: regions (fusion regions of its graph: a GEMM or convolution with "
        "its epilogue, a norm with its residual, attention; put back as custom ops torch.compile keeps) or "
        "modules (its leaf modules, put back as module replacements).",
        rich_help_panel=USER_PANEL,
    ),
    mode: str = typer.Option(
        "auto",
        help="How you run your model: eager, or a torch.compile mode (default, reduce-overhead, max-autotune; "
        "compile is default). A region's kernel stays only if the model is faster with it in this mode; auto: the "
        "mode your model runs fastest in without kernels (default unless another beats it by over 1%), timed here.",
        rich_help_panel=USER_PANEL,
    ),
    dtype: str = dtype_option(USER_PANEL),
    model: str = typer.Option(
        None,
        help="Model name; default: the server's first model. `hf:PATH` runs a local Hugging Face model (a directory "
        "or a .gguf file; on the GPU if there is one) in token mode, for a task (a model of your own is optimized "
        "with a chat model server).",
        rich_help_panel=MODEL_PANEL,
    ),
    token_mode: bool = typer.Option(
        False,
        "--token-mode",
        help="Drive a vLLM server token by token (prompt ids in, sampled ids and log-probabilities out), keeping "
        "the exact token ledger a trainer needs; needs --tokenizer.",
        rich_help_panel=MODEL_PANEL,
    ),
    tokenizer: str = typer.Option(
        None, help="The model's tokenizer (a directory or .gguf file), for --token-mode.", rich_help_panel=MODEL_PANEL
    ),
    replay: Path = typer.Option(
        None,
        help="Play recorded tool calls (a replay file, e.g. examples/replays/kernels-cpu.json) instead of a model: "
        "the real loop, evaluator and git, no model server; the run says it was a replay.",
        rich_help_panel=MODEL_PANEL,
    ),
    seed: int = typer.Option(None, help="Sampling seed of a local hf: model.", rich_help_panel=MODEL_PANEL),
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
        help="Seconds to wait for one reply of the server before retrying it (default 600).",
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
    device: str = device_option("The GPU (CUDA kernels) or the CPU (C++ kernels)."),
    confine: str = confine_option(),
    evaluator: str = typer.Option(
        None,
        envvar="CUDAGENT_EVALUATOR_URL",
        help="Build, verify and profile on a `cudagent serve` service at this URL (comma-separated URLs: a pool); "
        "the agent, its shell and git stay here. Its token: $CUDAGENT_EVALUATOR_TOKEN.",
        show_default=False,
    ),
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
    the branch cudagent/RUN-ID; the best verified kernel is tagged cudagent/RUN-ID/best."""
    from cudagent.agent.episode import EpisodeLimits
    from cudagent.agent.openai_policy import server_address
    from cudagent.agent.runner import PolicySettings, RunOptions, open_run, resume_run, start_run
    from cudagent.agent.ui import reporter_for
    from cudagent.settings import Settings

    if action_format is not None and action_format not in ("auto", "required", "text"):
        raise typer.BadParameter("use auto, required or text", param_hint="--action-format")
    own_model = hf is not None or any(v is not None for v in (module, inputs, init, example)) or _own_model(task)
    if own_model and resume is not None:
        raise CudagentError("--resume continues one episode run; a model run's spots are episode runs: resume those")
    if (task is None and not own_model) == (resume is None):
        raise CudagentError("give a task file to start a run, or --resume RUN to continue one (not both)")
    if top <= 0:
        raise typer.BadParameter("must be positive", param_hint="--top")
    if by not in ("regions", "modules"):
        raise typer.BadParameter("regions or modules", param_hint="--by")
    from cudagent.usermodel.alternatives import ASKED

    if mode not in ASKED:
        raise typer.BadParameter(", ".join(ASKED), param_hint="--mode")
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
    env_settings = Settings.from_env()
    settings = PolicySettings(
        base_url=base_url,
        api_key=api_key,
        model=model,
        mode=action_format,
        temperature=temperature,
        max_tokens=reply_tokens,
        timeout_s=request_timeout,
        prices_per_mtok=env_settings.prices_per_mtok,
    )
    options = RunOptions(
        settings=env_settings,
        device=device,
        evaluator_urls=evaluator_urls(evaluator),
        final_evaluation=final_check,
        sandbox=sandbox.value if sandbox is not None else None,
    )
    reporter = reporter_for(as_json)
    resuming_model = None  # a model run (what an interruption names to resume): True until it has an id
    try:
        parent = _model_run_to_resume(resume, env_settings) if resume is not None else None
        if parent is not None:
            from cudagent.agent.runner import reach_server
            from cudagent.usermodel.modelrun import resume_model_run

            options.limits = EpisodeLimits(**{k: v for k, v in overrides.items() if v is not None})
            resuming_model = parent
            for key, value in _recorded_policy(parent, env_settings).items():
                if getattr(settings, key, None) is None:  # what this command does not say, its episodes said
                    setattr(settings, key, value)
            reach_server(settings)
            _model_run(lambda episodes, say: resume_model_run(parent, episodes, options, say), settings, options,
                       overrides, reporter, as_json)  # fmt: skip
        if resume is not None:
            traj, lock = open_run(resume, env_settings)
            if traj.header.get("driver") == "token":
                from cudagent.agent.token_run import resume_token_run

                summary = resume_token_run(traj, options, overrides, reporter, lock)
            else:
                summary = resume_run(traj, lock, settings, options, overrides, reporter)
        elif own_model:
            if token_mode or (model or "").startswith("hf:"):
                raise CudagentError("a model of your own is optimized with a chat model server; drop --token-mode/hf:")
            options.limits = EpisodeLimits(**{k: v for k, v in overrides.items() if v is not None})
            from cudagent.agent.runner import reach_server
            from cudagent.usermodel.modelrun import ModelRequest, optimize_model

            request = ModelRequest(
                task, module, inputs, init, _text(example), _text(hf), top, keep_slower, by, mode, dtype
            )
            request.check_paths()  # a missing file first (exit 2), as the README orders them
            played = _replay_policy(replay, base_url, model, token_mode)
            if played is None:
                server_address(base_url)  # no server configured: said before the model is loaded (torch: seconds)

            user = request.load()  # the model and its inputs first (exit 2), then the server (exit 3), then the work
            if played is None:
                reach_server(settings)
            resuming_model = True
            _model_run(lambda episodes, say: optimize_model(request, user, episodes, options, say), settings, options,
                       overrides, reporter, as_json, played)  # fmt: skip
        else:
            task = Path(task)
            if not task.is_file():
                raise CudagentError(f"the task file {task} does not exist; give the path of a KernelBench-style .py")
            options.limits = EpisodeLimits(**{k: v for k, v in overrides.items() if v is not None})
            if token_mode or (model or "").startswith("hf:"):
                from cudagent.agent.token_run import TokenSettings, start_token_run

                token = TokenSettings(
                    model=model or "auto",
                    base_url=base_url if token_mode else None,
                    tokenizer=tokenizer,
                    api_key=api_key,
                    temperature=1.0 if temperature is None else temperature,
                    reply_tokens=reply_tokens or 1024,
                    context_tokens=context_tokens or 8192,
                    seed=seed,
                )
                summary = start_token_run(task, token, options, reporter)
            else:
                played = _replay_policy(replay, base_url, model, token_mode)
                if played is None:
                    server_address(base_url)  # before the task is loaded and the evaluator started
                summary = start_run(task, settings, options, reporter, policy=played)
    except KeyboardInterrupt:
        reporter.close()
        typer.echo(f"cudagent: interrupted; continue with `{_resume_command(resuming_model, env_settings)}`", err=True)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    except Terminated:
        reporter.close()
        again = _resume_command(resuming_model, env_settings)
        typer.echo(f"cudagent: terminated (SIGTERM); continue with `{again}`", err=True)
        raise typer.Exit(int(ExitCode.TERMINATED)) from None
    finally:
        reporter.close()
    reporter.summary(summary)
    if summary["exit_reason"] == "evaluator":
        raise EvaluatorUnusable(
            f"{summary['error']}; the run is recorded: resume it with `cudagent optimize --resume {summary['run_id']}` "
            "once the evaluator works"
        )
    code = ExitCode.ENVIRONMENT if summary["exit_reason"] == "policy_error" else ExitCode.OK
    if code != ExitCode.OK:
        typer.echo(
            f"cudagent: the model server failed: {summary['error']}; resume with "
            f"`cudagent optimize --resume {summary['run_id']}`",
            err=True,
        )
    raise typer.Exit(int(code))


def _replay_policy(replay: Path | None, base_url, model, token_mode: bool):
    """The replay policy `--replay FILE` asks for (agent/replay.py), or None; never beside a model server's options."""
    if replay is None:
        return None
    if base_url or model or token_mode:
        raise CudagentError(
            "--replay plays recorded calls instead of a model: give no --base-url, --model or --token-mode"
        )
    from cudagent.agent.replay import ReplayPolicy

    return ReplayPolicy(replay)


def _model_run(work, settings, options, overrides: dict, reporter, as_json: bool, policy=None) -> None:
    """Run `work(episodes, say)` (a new model run, or a resumed one), print its record, exit with its code."""
    from cudagent.agent.runner import ChatEpisodes

    limits = {k: v for k, v in overrides.items() if v is not None}
    episodes = ChatEpisodes(settings, options, reporter, limits, policy)
    say = lambda text: typer.echo(f"cudagent: {text}", err=True)  # noqa: E731
    record = work(episodes, say)
    reporter.close()
    _print_model_run(record, as_json)
    raise typer.Exit(int(record.get("exit_code", ExitCode.OK)))


def _model_run_to_resume(ref: str, settings) -> Path | None:
    """The model run `--resume REF` names: by its id (or a prefix, or its folder), or for `last`, the model run that
    the last episode run belongs to when that one stopped short; None for an episode run of its own."""
    from cudagent.agent.trajectory import list_runs, read_header
    from cudagent.usermodel.modelrun import find_model_run, is_model_run, load_record

    root = settings.runs_root
    if ref != "last":
        return find_model_run(ref, root)
    runs = list_runs(root)
    parent = read_header(runs[-1]).get("parent") if runs else None
    if parent and is_model_run(root / parent) and load_record(root / parent).get("state") != "done":
        return root / parent
    return None


def _recorded_policy(model_run: Path, settings) -> dict:
    """The policy settings an episode run of the model run recorded (the model server, the model...)."""
    from cudagent.agent.trajectory import list_runs, read_header

    for run_dir in list_runs(settings.runs_root):
        header = read_header(run_dir)
        if header.get("parent") == model_run.name:
            return dict(header.get("policy_settings") or {})
    return {}


def _resume_command(model_run, settings) -> str:
    """What continues the interrupted run: the model run by its id (its latest record), or the last episode run."""
    from cudagent.usermodel.modelrun import list_model_runs, load_record

    if model_run is None:
        return "cudagent optimize --resume last"
    if isinstance(model_run, Path):
        return f"cudagent optimize --resume {model_run.name}"
    stopped = [p for p in list_model_runs(settings.runs_root) if load_record(p).get("state") == "interrupted"]
    return f"cudagent optimize --resume {stopped[-1].name}" if stopped else "cudagent optimize --resume last"


def _text(path: Path | None) -> str | None:
    return str(path) if path is not None else None


def _own_model(task: str | None) -> bool:
    """A file that is not a KernelBench task (no Model, get_inputs, get_init_inputs at its top), or FILE:CLASS."""
    import ast

    if task is None:
        return False
    path_text, colon, _ = task.partition(":")
    if colon:
        return True
    path = Path(path_text)
    if not path.is_file() or path.suffix != ".py":
        return False
    try:
        tree = parse(path.read_text())
    except (SyntaxError, UnicodeDecodeError, OSError):
        return False  # load_task says what is wrong with it
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    return not {"Model", "get_inputs", "get_init_inputs"} <= names


def _print_model_run(record: dict, as_json: bool) -> None:
    import json

    if as_json:
        typer.echo(json.dumps({"event": "model_run", **record}, default=str))
        return
    result = record.get("result") or {}
    typer.echo(f"model run {record['run_id']}: {record['model']}")
    for s in record["spots"]:
        speed = f", {s['speedup_vs_eager']:.2f}x over eager" if s.get("speedup_vs_eager") else ""
        typer.echo(f"  {s['spot']} ({100 * s['share']:.1f}%): {s.get('outcome')}{speed} {s.get('run_id') or ''}")
    timing = result.get("timing") or {}
    if result.get("correct") and timing:
        typer.echo(
            f"  end to end: {timing.get('speedup_vs_eager', 0):.2f}x over eager measured, "
            f"{(result.get('predicted_speedup_vs_eager') or 0):.2f}x predicted"
            + (f"; {timing['speedup_vs_compile']:.2f}x over torch.compile" if timing.get("speedup_vs_compile") else "")
        )
    elif result.get("why"):
        typer.echo(f"  nothing put back: {result['why']}")
    if result.get("package"):
        typer.echo(f"  report: {Path(result['package']).parent / 'report.md'}; package: {result['package']}")
