"""Starting and resuming runs: everything `cudagent optimize` sets up around an episode.

A new run checks what can fail before it creates anything (the task, the device, the model server), then makes
the run directory, the branch and the workspace, commits the workspace as the branch's first commit, and writes
the trajectory's header. Then a driver steps the episode (the chat driver for a chat server, the token driver for
a token-level backend) and the recorders keep the branch, the trajectory and the live UI. A resumed run reads the
trajectory, resets the branch to the last recorded head (a turn cut off by a crash left nothing behind) and goes
on with the same model server, unless told otherwise.

It stays one module (about 430 lines): new and resumed runs share their set-up step by step, and a
split would put the two halves of each step in different files.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from cudagent.agent.chat_driver import ChatDriver
from cudagent.agent.environment import open_episode
from cudagent.agent.episode import Episode, EpisodeLimits, EpisodeResult, EpisodeState
from cudagent.agent.gitrun import RunRepo
from cudagent.agent.policy import PolicyError
from cudagent.agent.recorders import EventRecorder, GitRecorder, Recorders, TrajectoryRecorder
from cudagent.agent.trajectory import Trajectory, find_run, new_run_id
from cudagent.boundary.shell import Sandbox
from cudagent.boundary.shell import choose as choose_sandbox
from cudagent.errors import CudagentError, EnvironmentProblem, Terminated
from cudagent.evaluator.port import agent_files
from cudagent.settings import Settings
from cudagent.workspace import Workspace


@dataclass
class PolicySettings:
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    mode: str | None = None  # auto, required or text; None probes the server
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float | None = None  # one request; None: 600 s
    prices_per_mtok: tuple[float, float] | None = None  # dollars per million (prompt, completion) tokens

    def build(self):
        from cudagent.agent.openai_policy import OpenAIChatPolicy

        def tell(text: str) -> None:
            sys.stderr.write(f"cudagent: {text}\n")
            sys.stderr.flush()

        return OpenAIChatPolicy(
            on_retry=tell,
            base_url=self.base_url,
            api_key=self.api_key,
            model=self.model,
            mode=self.mode,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            timeout_s=self.timeout_s or 600.0,
            prices_per_mtok=self.prices_per_mtok,
        )


@dataclass
class RunOptions:
    settings: Settings
    device: str = "auto"
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    final_evaluation: bool = True
    sandbox: str | None = None  # auto, bwrap, limits or none; None: auto for a new run, the recorded one on resume
    evaluator_urls: list[str] | None = None  # `cudagent serve` services to evaluate on; None: this machine


def open_port(task, options: RunOptions, device_kind: str):
    """The run's evaluator port, opened (it validates the task: a broken reference fails here, before any run
    exists; a service that does not answer fails at once), and what the trajectory records of where it is."""
    from cudagent.evaluator.evaluator import EvalOptions
    from cudagent.evaluator.where import evaluators

    where = evaluators(
        options.evaluator_urls,
        device=device_kind,
        options=EvalOptions.from_settings(options.settings, spare_process=True),
        home=options.settings.home,
    )
    port = where.port(task)
    asyncio.run(port.open(fail_fast=True))
    return port, where.where()


@dataclass
class Run:
    """A run's pieces once set up, whoever drives it."""

    run_id: str
    traj: Trajectory
    repo: RunRepo
    evaluator: object  # the evaluator port
    episode: Episode
    recorders: Recorders
    sandbox: Sandbox
    lock: object  # held from creation (or resume) to the end: one process per run


def start_run(
    task_path: Path, policy_settings: PolicySettings, options: RunOptions, reporter, policy=None, extra_header=None
) -> dict:
    """Start a run with a chat policy. `policy` replaces the one `policy_settings` describe (a replay in benchmarks);
    the settings are still what the trajectory records for a resume. `extra_header` joins the trajectory's header
    (a model run's episodes name their parent and spot)."""
    policy = policy if policy is not None else policy_settings.build()
    recorded = {k: v for k, v in asdict(policy_settings).items() if k not in ("api_key", "prices_per_mtok")}
    header = {"policy_settings": recorded, **(extra_header or {})}
    run = new_run(task_path, options, reporter, _Prepared(policy), header)
    return drive(run, ChatDriver(run.episode, policy, run.recorders, options.final_evaluation), reporter, policy.model)


def new_run(task_path: Path, options: RunOptions, reporter, model, extra_header: dict | None = None) -> Run:
    """Validate, create the run directory, branch, workspace and trajectory, and the episode over them.
    `model` (a chat policy, or a token backend's stand-in) has `prepare()`, run before anything exists (it may
    fail), `describe()`, `model` and `action_format`."""
    from cudagent.task import load_task

    task = load_task(task_path)
    requested_sandbox = options.sandbox or "auto"
    sandbox = choose_sandbox(requested_sandbox)
    evaluator, remote = open_port(task, options, options.device)  # the task validated (a broken one: exit 2)
    try:
        model.prepare()  # the model server reached before any baseline or build: a wrong address costs nothing
    except BaseException:
        asyncio.run(evaluator.close())
        raise
    run_id = new_run_id(Path(task_path).stem)
    run_dir = options.settings.runs_root / run_id
    run_dir.mkdir(parents=True)
    lock = _lock(run_dir)
    repo = RunRepo.create(Path(task_path), run_dir, run_id, Path(task_path).stem)
    Workspace.create(Path(repo.workspace), task.source)
    repo.ensure_ignore_file()
    base = repo.commit(
        f"cudagent: workspace for {task.name}", trailers={"Cudagent-Run": run_id, "Cudagent-Turn": 0}, allow_empty=True
    )
    repo.base_commit = base
    policy_description = model.describe()
    episode = open_episode(
        task,
        Workspace(Path(repo.workspace)),
        evaluator,
        options.limits,
        model.action_format,
        sandbox=sandbox,
        read_only=(repo.link_path,),
        model=model.model,
        state=EpisodeState(head=base),
    )
    header = {
        "run_id": run_id,
        "created": time.time(),
        "task": {
            "path": str(Path(task_path).resolve()),
            "name": task.name,
            "sha256": task.sha256,
            "source": task.source,
        },
        "device": evaluator.device(),
        "env": episode.env,
        **({"evaluator": remote} if remote else {}),
        "policy": policy_description,
        "limits": options.limits.to_dict(),
        "sandbox": {**sandbox.to_dict(), "requested": requested_sandbox},
        "repo": repo.to_dict(),
        "messages": episode.messages,
        "state": asdict(episode.state),
        **(extra_header or {}),
    }
    traj = Trajectory.create(run_dir, header)
    return _assemble(
        run_id, traj, repo, evaluator, episode, sandbox, reporter, options.limits, policy_description, lock
    )


def open_run(ref: str, settings: Settings) -> tuple[Trajectory, object]:
    """The trajectory of run `ref` and its lock (one process per run: a live run is refused)."""
    run_dir = find_run(ref, settings.runs_root)
    lock = _lock(run_dir)
    try:
        return Trajectory.load(run_dir), lock
    except BaseException:
        lock.close()
        raise


def resume_run(
    traj: Trajectory, lock, policy_settings: PolicySettings | None, options: RunOptions, limit_overrides: dict, reporter
) -> dict:
    """Continue a chat run from its trajectory (open_run gives both)."""
    try:
        return _resume_chat(traj, policy_settings, options, limit_overrides, reporter, lock)
    except BaseException:
        lock.close()
        raise


def _resume_chat(traj, policy_settings, options, limit_overrides, reporter, lock) -> dict:
    h = traj.header
    settings = PolicySettings(**h.get("policy_settings", {}))
    for key, value in asdict(policy_settings or PolicySettings()).items():
        if value is not None:
            setattr(settings, key, value)
    settings.model = settings.model or h["policy"].get("model")
    if settings.mode is None:
        settings.mode = h["policy"].get("mode")
    if h["policy"].get("kind") == "replay":  # played again from the same file
        from cudagent.agent.replay import ReplayPolicy

        policy = ReplayPolicy(Path(h["policy"]["file"]))
    else:
        policy = settings.build()
    run = reopen_run(traj, options, limit_overrides, reporter, _Prepared(policy), lock)
    return drive(run, ChatDriver(run.episode, policy, run.recorders, options.final_evaluation), reporter, policy.model)


def reopen_run(traj: Trajectory, options: RunOptions, limit_overrides: dict, reporter, model, lock) -> Run:
    from cudagent.task import Task

    h = traj.header
    repo = RunRepo.from_dict(h["repo"])
    if not Path(repo.repo_dir).is_dir():
        raise CudagentError(f"the run's checkout {repo.repo_dir} is gone; the run cannot resume")
    model.prepare()
    limits = EpisodeLimits(**{**traj.limits, **{k: v for k, v in limit_overrides.items() if v is not None}})
    state = EpisodeState.from_dict(traj.last_state)
    traj.add_resume({"time": time.time(), "limits": limits.to_dict(), "from_turn": len(traj.turns)})
    repo.reset_to(state.head)
    task = Task(h["task"]["name"], h["task"]["source"], Path(h["task"]["path"]))
    if options.evaluator_urls is None and h.get("evaluator"):
        options = replace(options, evaluator_urls=h["evaluator"]["urls"])  # where the run was evaluated
    evaluator, _ = open_port(task, options, h["device"]["kind"])
    sandbox = choose_sandbox(options.sandbox or h.get("sandbox", {}).get("requested", "auto"))
    best_files = None
    if state.best and state.best.commit:
        best_files = agent_files(repo.files_at(state.best.commit))
    episode = open_episode(
        task,
        Workspace(Path(repo.workspace)),
        evaluator,
        limits,
        model.action_format,
        sandbox=sandbox,
        read_only=(repo.link_path,),
        model=model.model,
        state=state,
        messages=traj.messages(),
        best_files=best_files,
    )
    return _assemble(h["run_id"], traj, repo, evaluator, episode, sandbox, reporter, limits, h["policy"], lock)


def _assemble(run_id, traj, repo, evaluator, episode, sandbox, reporter, limits, policy_description, lock) -> Run:
    recorders = Recorders(
        GitRecorder(repo, run_id, policy_description.get("model", ""), episode.env.get("gpu")),
        TrajectoryRecorder(traj, policy_description),
        EventRecorder(reporter, limits),
    )
    episode.on_improvement = recorders.improved
    episode.on_call = recorders.started
    return Run(run_id, traj, repo, evaluator, episode, recorders, sandbox, lock)


def drive(run: Run, driver, reporter, model: str) -> dict:
    """Run the driver to the end of the episode; record the end; return the summary. Ctrl-C ends the episode as
    `interrupted` (recorded, resumable) and is raised again."""
    warn_about_sandbox(run.sandbox)
    reporter.event(
        {
            "event": "start",
            "run_id": run.run_id,
            "turn": run.episode.state.turn,
            "max_turns": run.episode.limits.max_turns,
            "model": model,
            "branch": run.repo.branch,
            "run_dir": str(run.traj.run_dir),
            "sandbox": run.sandbox.to_dict(),
        }
    )
    try:
        result = asyncio.run(_drive(run, driver))
    except (KeyboardInterrupt, asyncio.CancelledError):
        if driver.interrupted is not None:
            run.recorders.end(driver.interrupted, summarize(run, driver.interrupted, model))
        if driver.interrupt_reason == "terminated":
            raise Terminated() from None
        raise KeyboardInterrupt from None
    finally:
        run.lock.close()
    summary = summarize(run, result, model)
    run.recorders.end(result, summary)
    return summary


async def _drive(run: Run, driver) -> EpisodeResult:
    """SIGTERM ends the episode as Ctrl-C does (recorded, resumable); asyncio.run already handles SIGINT."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()

    def terminate() -> None:
        driver.interrupt_reason = "terminated"
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, terminate)
    try:
        return await driver.run()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        await run.evaluator.close()


def summarize(run: Run, result: EpisodeResult, model: str) -> dict:
    s = result.state
    return {
        "run_id": run.run_id,
        "run_dir": str(run.traj.run_dir),
        "repo": run.repo.repo_dir,
        "workspace": run.repo.workspace,
        "branch": run.repo.branch,
        "turns": s.turn,
        "exit_reason": result.end_reason,
        "error": result.error,
        "best": result.best_summary(),
        "final": result.final_summary(),
        "tokens": {"prompt": s.prompt_tokens, "completion": s.completion_tokens},
        "cost_usd": s.cost_usd,
        "elapsed_s": round(s.elapsed_s, 1),
        "model": model,
        "tool_calls": {"valid": s.valid_calls, "invalid": s.invalid_calls},
    }


def warn_about_sandbox(sandbox: Sandbox) -> None:
    """On stderr, whatever the output format: the shell runs unconfined, or less confined than asked."""
    warning = None
    if sandbox.mode == "none":
        warning = "--sandbox none: model-written shell commands run unconfined, with your permissions"
    elif sandbox.note:
        warning = sandbox.note
    if warning:
        sys.stderr.write(f"cudagent: warning: {warning}\n")
        sys.stderr.flush()


@dataclass
class ChatEpisodes:
    """A model run's episodes with one chat policy (usermodel/modelrun.Episodes): each spot's started, an interrupted
    one resumed, and the episode run a spot started found again from the headers that name it."""

    policy_settings: PolicySettings
    options: RunOptions
    reporter: object
    limit_overrides: dict = field(default_factory=dict)
    policy: object = None  # a policy of its own (a replay) instead of the one the settings describe

    def start(self, task_path: Path, extra_header: dict) -> dict:
        return start_run(
            Path(task_path), self.policy_settings, self.options, self.reporter, self.policy, extra_header=extra_header
        )

    def resume(self, run_id: str) -> dict:
        traj, lock = open_run(run_id, self.options.settings)
        return resume_run(traj, lock, self.policy_settings, self.options, self.limit_overrides, self.reporter)

    def run_of(self, parent: str, spot: str) -> str | None:
        from cudagent.agent.trajectory import list_runs, read_header

        for run_dir in reversed(list_runs(self.options.settings.runs_root)):
            header = read_header(run_dir)
            if header.get("parent") == parent and header.get("spot") == spot:
                return header.get("run_id")
        return None


def reach_server(policy_settings: PolicySettings) -> None:
    """Build the chat policy and reach its server once (list its models, probe its tool calls), before a model run
    profiles or builds anything: a missing or unreachable server is one sentence and exit 3 at once."""
    _Prepared(policy_settings.build()).prepare()


class _Prepared:
    """A chat policy whose prepare() failure is an environment problem (exit 3), with one clear sentence."""

    def __init__(self, policy):
        self.policy = policy

    def prepare(self) -> None:
        try:
            self.policy.prepare()
        except PolicyError as exc:
            raise EnvironmentProblem(f"the model server cannot be used: {exc.message}") from exc

    def describe(self) -> dict:
        return self.policy.describe()

    @property
    def model(self) -> str:
        return self.policy.model

    @property
    def action_format(self) -> str:
        return self.policy.action_format


class _Lock:
    def __init__(self, fd: int):
        self.fd = fd

    def close(self) -> None:
        os.close(self.fd)


def _lock(run_dir: Path) -> _Lock:
    """One process per run: a second `--resume` of a live run is refused, a killed one's lock dies with it."""
    fd = os.open(run_dir / ".lock", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise CudagentError(f"the run in {run_dir} is in use by another cudagent process") from None
    return _Lock(fd)
