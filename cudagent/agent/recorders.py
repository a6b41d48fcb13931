"""Recorders take what an episode produces: its better kernels, its turns and its end.

    GitRecorder         a commit per turn that changed files, an immediate commit with trailers for each better
                        kernel, and the tag cudagent/<run-id>/best (the run branch of gitrun.py)
    TrajectoryRecorder  the trajectory file, one fsync'ed line per turn (trajectory.py)
    EventRecorder       the live UI or the JSON event stream of `optimize` (ui.py)
    MemoryRecorder      everything in lists, for training and tests: no branch, no worktree, no files

Recorders run in the order given; what one returns (a commit, the branch head) is passed to the next.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, replace

from cudagent.agent.best import Best
from cudagent.agent.episode import EpisodeResult, EpisodeState, Turn
from cudagent.boundary.git import GitError
from cudagent.evaluator.verdict import Verdict


class Recorder:
    """The base: every hook does nothing and adds nothing."""

    def improved(self, best: Best, verdict: Verdict) -> dict:
        return {}

    def notice(self, reason: str, turn: int) -> None:
        pass

    def started(self, turn: int, what: str) -> None:
        """Something that may take a while began (the model's reply, a tool call): for a person watching."""

    def turn(self, turn: Turn, state: EpisodeState, extra: dict) -> dict:
        return {}

    def end(self, result: EpisodeResult, summary: dict) -> None:
        pass


class Recorders(Recorder):
    def __init__(self, *recorders: Recorder):
        self.recorders = list(recorders)

    def improved(self, best: Best, verdict: Verdict) -> dict:
        extra: dict = {}
        for r in self.recorders:
            extra.update(r.improved(replace(best, **extra), verdict))
        return extra

    def notice(self, reason: str, turn: int) -> None:
        for r in self.recorders:
            r.notice(reason, turn)

    def started(self, turn: int, what: str) -> None:
        for r in self.recorders:
            r.started(turn, what)

    def turn(self, turn: Turn, state: EpisodeState, extra: dict | None = None) -> dict:
        extra = dict(extra or {})
        for r in self.recorders:
            extra.update(r.turn(turn, state, extra))
        return extra

    def end(self, result: EpisodeResult, summary: dict) -> None:
        for r in self.recorders:
            r.end(result, summary)


class GitRecorder(Recorder):
    """A repository the model damaged (possible where the shell is not confined) or a disk that is full fails a
    commit: that is one sentence for the model (`notice`) and on stderr, and the run goes on without it."""

    def __init__(self, repo, run_id: str, model: str, gpu: str | None):
        self.repo, self.run_id, self.model, self.gpu = repo, run_id, model, gpu

    def improved(self, best: Best, verdict: Verdict) -> dict:
        trailers = {
            "Cudagent-Run": self.run_id,
            "Cudagent-Turn": best.turn,
            "Cudagent-Tier": best.tier,
            "Cudagent-Speedup-Eager": _fmt(best.speedup_vs_eager),
            "Cudagent-Speedup-Compile": _fmt(best.speedup_vs_compile),
            "Cudagent-GPU": self.gpu,
            "Cudagent-Model": self.model,
        }
        subject = f"turn {best.turn}: new best, tier {best.tier}"
        if best.speedup_vs_compile:
            subject += f", {best.speedup_vs_compile:.2f}x vs torch.compile"
        body = "The evaluator verified this workspace" + (
            " and timed it." if verdict.time_ms.get("candidate") else " (no timing)."
        )
        try:
            sha = self.repo.commit(subject, body, trailers, allow_empty=True)
            return {"commit": sha, "tag": self.repo.set_best(sha)}
        except (GitError, OSError) as exc:
            return {"notice": _unrecorded(f"the better kernel of turn {best.turn}", exc)}

    def turn(self, turn: Turn, state: EpisodeState, extra: dict) -> dict:
        tools = ", ".join(a["tool"] for a in turn.actions) or "no action"
        try:
            sha = self.repo.commit(
                f"turn {turn.number}: {tools}", trailers={"Cudagent-Run": self.run_id, "Cudagent-Turn": turn.number}
            )
            state.head = self.repo.head()
        except (GitError, OSError) as exc:
            return {"notice": _unrecorded(f"turn {turn.number}", exc)}
        return {"commit": sha, "head": state.head}


class TrajectoryRecorder(Recorder):
    def __init__(self, trajectory, policy_description: dict):
        self.traj, self.policy = trajectory, policy_description

    def turn(self, turn: Turn, state: EpisodeState, extra: dict) -> dict:
        actions = []
        for i, a in enumerate(turn.actions):
            a = dict(a)
            if "full_output" in a:  # long outputs live in files beside the trajectory
                a["full_output"] = self.traj.save_output(turn.number, i, a["full_output"])
            if "traceback" in a:  # so do the tracebacks of calls that failed inside cudagent
                a["traceback"] = self.traj.save_output(turn.number, i, a["traceback"], kind="errors")
            actions.append(a)
        self.traj.add_turn(
            {
                "turn": turn.number,
                "started": turn.started,
                "seconds": turn.seconds,
                "reply": turn.reply,
                "actions": actions,
                "messages": turn.added,
                "commit": extra.get("commit"),
                "policy": self.policy,
                "state": asdict(state),
            }
        )
        return {}

    def end(self, result: EpisodeResult, summary: dict) -> None:
        self.traj.add_end(
            {
                "exit_reason": result.end_reason,
                "error": result.error,
                "state": asdict(result.state),
                "summary": summary,
            }
        )


class EventRecorder(Recorder):
    """Turns, improvements, notices and the end as events for a reporter (ui.py)."""

    def __init__(self, reporter, limits):
        self.report, self.limits = reporter, limits
        self._improvements: list[dict] = []

    def improved(self, best: Best, verdict: Verdict) -> dict:
        self._improvements.append({"event": "improvement", **best.to_dict()})  # told after its turn's line
        return {}

    def notice(self, reason: str, turn: int) -> None:
        self.report.event({"event": "notice", "reason": reason, "turn": turn})

    def started(self, turn: int, what: str) -> None:
        progress = getattr(self.report, "progress", None)
        if progress is not None:
            progress(turn, what)

    def turn(self, turn: Turn, state: EpisodeState, extra: dict) -> dict:
        self.report.event(
            {
                "event": "turn",
                "turn": turn.number,
                "max_turns": self.limits.max_turns,
                "tools": [a["tool"] for a in turn.actions],
                "summary": turn_summary(turn),
                "tokens": state.tokens,
                "elapsed_s": round(state.elapsed_s, 1),
                "commit": extra.get("commit"),
                "best": state.best.to_dict() if state.best else None,
            }
        )
        for event in self._improvements:
            self.report.event(event)
        self._improvements.clear()
        return {}

    def end(self, result: EpisodeResult, summary: dict) -> None:
        self.report.event(
            {"event": "end", "exit_reason": result.end_reason, "error": result.error, "turns": result.state.turn}
        )


class MemoryRecorder(Recorder):
    def __init__(self):
        self.turns: list[Turn] = []
        self.improvements: list[Best] = []
        self.notices: list[tuple[str, int]] = []
        self.result: EpisodeResult | None = None

    def improved(self, best: Best, verdict: Verdict) -> dict:
        self.improvements.append(best)
        return {}

    def notice(self, reason: str, turn: int) -> None:
        self.notices.append((reason, turn))

    def turn(self, turn: Turn, state: EpisodeState, extra: dict) -> dict:
        self.turns.append(turn)
        return {}

    def end(self, result: EpisodeResult, summary: dict) -> None:
        self.result = result


def turn_summary(turn: Turn) -> str:
    """One line for a person: the tools called and what they were called on."""
    if not turn.actions:
        return f"format error: {turn.reply.get('format_error') or 'no tool call'}"[:120]
    parts = []
    for a in turn.actions:
        args = a.get("arguments") or {}
        detail = " ".join(str(args.get("path") or args.get("command") or "").split())[:60]
        parts.append(f"{a['tool']} {detail}".strip() + ("" if a["ok"] else " (failed)"))
    return "; ".join(parts)


def _unrecorded(what: str, exc: Exception) -> str:
    text = f"the run's git could not record {what}: {exc}; the run goes on, and later turns are committed as usual"
    sys.stderr.write(f"cudagent: warning: {text}\n")
    return text


def _fmt(x) -> str | None:
    return None if x is None else f"{x:.3f}"
