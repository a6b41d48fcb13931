"""The one way an episode is opened: a task, its workspace, an opened evaluator port, the limits and the action format.

    episode = open_episode(task, workspace, port, limits, action_format)              a new episode
    episode = open_episode(..., state=..., messages=..., best_files=...)               a resumed one

`cudagent optimize` (new and resumed runs, chat and token mode), the bench's agent runs, training rollouts and the
tests all open episodes here, so what the prompts say about the machine (the port's description, the skills for
its device) and what the tools may touch are decided in one place.
"""

from __future__ import annotations

from pathlib import Path

from cudagent.agent.episode import Episode, EpisodeLimits, EpisodeState, TaskInfo
from cudagent.agent.prompting import Prompts, load_skills
from cudagent.agent.tools import Toolbox
from cudagent.boundary.shell import Sandbox
from cudagent.evaluator.port import EvaluatorPort, Snapshot
from cudagent.task import Task
from cudagent.workspace import Workspace


def open_episode(
    task: Task,
    workspace: Workspace,
    port: EvaluatorPort,
    limits: EpisodeLimits,
    action_format: str,
    *,
    sandbox: Sandbox | None = None,
    read_only: tuple[Path, ...] = (),
    model: str = "",
    state: EpisodeState | None = None,
    messages: list[dict] | None = None,
    best_files: Snapshot | None = None,
    prompts: Prompts | None = None,
) -> Episode:
    """An episode of `task` in `workspace`, judged through `port` (opened: its description and device are read).
    `sandbox` confines the shell (none by default) and `read_only` adds paths it may not change. `state`,
    `messages` and `best_files` resume an episode; without `messages` it opens with the system and task messages,
    the skills chosen for the port's device."""
    described = port.describe()
    skills = [] if messages is not None else load_skills(port.device().get("kind", "cuda"))
    return Episode(
        TaskInfo(task.name, task.source),
        Toolbox(workspace, task.source, port, sandbox, read_only=read_only),
        port,
        limits,
        action_format=action_format,
        env=described["env"],
        skills=skills,
        prompts=prompts,
        model=model,
        state=state,
        messages=messages,
        best_files=best_files,
        baselines=described["baselines"],
    )
