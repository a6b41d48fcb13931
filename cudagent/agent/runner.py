"""Starting and resuming runs: everything `cudagent optimize` sets up around the loop.

A new run checks what can fail before it creates anything (the task, the device, the model server), then makes
the run directory, the branch and the workspace, commits the workspace as the branch's first commit, and writes
the trajectory's header. A resumed run reads the trajectory, resets the branch to the last recorded head (a turn
cut off by a crash left nothing behind) and goes on with the same model server, unless told otherwise.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cudagent.agent.gitrun import RunRepo
from cudagent.agent.loop import Agent, Limits, LoopState, RunInfo
from cudagent.agent.policy import PolicyError
from cudagent.agent.prompting import Prompts, load_skills
from cudagent.agent.sandbox import Sandbox
from cudagent.agent.sandbox import choose as choose_sandbox
from cudagent.agent.tools import Toolbox
from cudagent.agent.trajectory import Trajectory, find_run, new_run_id, runs_root
from cudagent.errors import CudagentError, EnvironmentProblem


@dataclass
class PolicySettings:
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    mode: str | None = None  # auto, required or text; None probes the server
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float | None = None  # one request; None: 600 s

    def build(self):
        from cudagent.agent.openai_policy import OpenAIChatPolicy

        prices = None
        if os.environ.get("CUDAGENT_PRICE_INPUT") and os.environ.get("CUDAGENT_PRICE_OUTPUT"):
            prices = (float(os.environ["CUDAGENT_PRICE_INPUT"]), float(os.environ["CUDAGENT_PRICE_OUTPUT"]))
        return OpenAIChatPolicy(
            base_url=self.base_url,
            api_key=self.api_key,
            model=self.model,
            mode=self.mode,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            timeout_s=self.timeout_s or 600.0,
            prices_per_mtok=prices,
        )


@dataclass
class RunOptions:
    device: str = "auto"
    limits: Limits = field(default_factory=Limits)
    final_evaluation: bool = True
    sandbox: str | None = None  # auto, bwrap, limits or none; None: auto for a new run, the recorded one on resume


def start_run(task_path: Path, policy_settings: PolicySettings, options: RunOptions, reporter, policy=None) -> dict:
    """Start a run. `policy` replaces the one `policy_settings` describe (a token-level policy in training, a
    replay in benchmarks); the settings are still what the trajectory records for a resume."""
    from cudagent.evaluator import Evaluator
    from cudagent.hardware import resolve_device
    from cudagent.task import load_task

    task = load_task(task_path)
    device = resolve_device(options.device)
    requested_sandbox = options.sandbox or "auto"
    sandbox = choose_sandbox(requested_sandbox)
    evaluator = Evaluator(task, device)  # validates the task: a broken reference fails here, before any run exists
    try:
        policy = _prepared(policy if policy is not None else policy_settings.build())
    except BaseException:
        evaluator.close()
        raise
    run_id = new_run_id(Path(task_path).stem)
    run_dir = runs_root() / run_id
    run_dir.mkdir(parents=True)
    lock = _lock(run_dir)
    repo = RunRepo.create(Path(task_path), run_dir, run_id, Path(task_path).stem)
    from cudagent.workspace import Workspace

    Workspace.create(Path(repo.workspace), task.source)
    repo.ensure_ignore_file()
    base = repo.commit(
        f"cudagent: workspace for {task.name}", trailers={"Cudagent-Run": run_id, "Cudagent-Turn": 0}, allow_empty=True
    )
    repo.base_commit = base
    info = RunInfo(run_id, task.name, task.source, environment(device), load_skills(device.kind))
    prompts = Prompts()
    messages = Agent.opening_messages(
        prompts, info, options.limits, policy.action_format, repo.workspace, evaluator.baselines.cached_medians()
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
        "device": device.to_dict(),
        "env": info.env,
        "policy": policy.describe(),
        "policy_settings": {k: v for k, v in asdict(policy_settings).items() if k != "api_key"},
        "limits": options.limits.to_dict(),
        "sandbox": {**sandbox.to_dict(), "requested": requested_sandbox},
        "repo": repo.to_dict(),
        "messages": messages,
        "state": asdict(LoopState(head=base)),
    }
    traj = Trajectory.create(run_dir, header)
    try:
        return _drive(info, traj, policy, evaluator, repo, options, reporter, prompts, sandbox)
    finally:
        lock.close()


def resume_run(
    ref: str, policy_settings: PolicySettings | None, options: RunOptions, limit_overrides: dict, reporter
) -> dict:
    from cudagent.evaluator import Evaluator
    from cudagent.hardware import resolve_device
    from cudagent.task import Task

    run_dir = find_run(ref)
    lock = _lock(run_dir)
    try:
        traj = Trajectory.load(run_dir)
        h = traj.header
        repo = RunRepo.from_dict(h["repo"])
        if not Path(repo.repo_dir).is_dir():
            raise CudagentError(f"the run's checkout {repo.repo_dir} is gone; the run cannot resume")
        settings = PolicySettings(**h.get("policy_settings", {}))
        for key, value in asdict(policy_settings or PolicySettings()).items():
            if value is not None:
                setattr(settings, key, value)
        settings.model = settings.model or h["policy"].get("model")
        if settings.mode is None:
            settings.mode = h["policy"].get("mode")
        policy = _prepared(settings.build())
        limits = Limits(**{**traj.limits, **{k: v for k, v in limit_overrides.items() if v is not None}})
        traj.add_resume({"time": time.time(), "limits": limits.to_dict(), "from_turn": len(traj.turns)})
        repo.reset_to(traj.last_state["head"])
        task = Task(h["task"]["name"], h["task"]["source"], Path(h["task"]["path"]))
        device = resolve_device(h["device"]["kind"])
        evaluator = Evaluator(task, device)
        sandbox = choose_sandbox(options.sandbox or h.get("sandbox", {}).get("requested", "auto"))
        info = RunInfo(h["run_id"], task.name, task.source, h["env"], [])
        options.limits = limits
        return _drive(info, traj, policy, evaluator, repo, options, reporter, Prompts(), sandbox)
    finally:
        lock.close()


def _drive(info, traj, policy, evaluator, repo, options, reporter, prompts, sandbox) -> dict:
    from cudagent.workspace import Workspace

    warn_about_sandbox(sandbox)
    toolbox = Toolbox(
        Workspace(Path(repo.workspace)), info.task_source, lambda: evaluator, sandbox, read_only=(repo.link_path,)
    )
    agent = Agent(info, traj, policy, toolbox, repo, options.limits, reporter, prompts, options.final_evaluation)
    try:
        return agent.run()
    finally:
        toolbox.close()
        evaluator.close()


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


def _prepared(policy):
    try:
        policy.prepare()
    except PolicyError as exc:
        raise EnvironmentProblem(f"the model server cannot be used: {exc.message}") from exc
    return policy


def environment(device) -> dict:
    """What the prompts say about the machine."""
    import torch

    if device.is_cuda:
        return {
            "gpu": device.name,
            "arch": device.arch,
            "device": "cuda",
            "cuda": device.cuda_version or "?",
            "torch": torch.__version__,
        }
    return {
        "gpu": f"CPU ({device.name}, no GPU: write C++ kernels)",
        "arch": "host",
        "device": "cpu",
        "cuda": "none",
        "torch": torch.__version__,
    }


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
