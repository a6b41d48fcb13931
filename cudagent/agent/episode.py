"""The episode: one task, one workspace, the tools, the limits and the best kernel so far. An environment that
drivers step; it has no policy, no git, no trajectory file and no UI of its own.

    opening()            the system and task messages
    notices()            limit warnings due before the next reply (their messages join the history)
    await act(reply)     run the reply's tool calls; the history gains the reply and the observations
    stop_reason()        a limit reached, `finished`, or None
    await finish(reason) the best kernel re-evaluated from its own files, and the EpisodeResult

What the loop adds to the history is always a `tool` or `user` message: the tokens a trainer masks. A better
verified kernel is reported to `on_improvement` at once (the git recorder commits the workspace then, so the commit
holds exactly what was evaluated), and its files are kept as a snapshot, so the final evaluation needs no git.

It stays one module (about 470 lines): the episode's state, limits and turn are one object's parts, and
splitting them would make every driver import three modules to step one thing.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field

from cudagent.agent.best import Best, is_better
from cudagent.agent.policy import PolicyReply, ToolCall, Usage
from cudagent.agent.prompting import Prompts, Skill
from cudagent.agent.tools import EVALUATING, TOOL_SPECS, Observation, Toolbox
from cudagent.agent.trajectory import reply_record
from cudagent.evaluator.port import EvaluatorPort, Snapshot, snapshot_of
from cudagent.evaluator.verdict import Verdict

# Every reason an episode ends for: its limits (stop_reason), then the drivers' own (the context is full, the model
# server failed, a signal). Metrics that count them per reason need the whole list: a batch must carry the same
# keys in every row.
END_REASONS = ("finished", "max_turns", "wall_time", "tokens", "format_errors", "patience", "target_reached", "stuck")
END_REASONS += ("evaluator", "context", "policy_error", "interrupted", "terminated")

MAX_CALLS_PER_TURN = 8


@dataclass
class EpisodeLimits:
    max_turns: int = 200
    max_minutes: float | None = None
    max_tokens: int | None = None
    max_format_errors: int = 5  # consecutive replies with no usable action
    patience: int | None = None  # turns without a better verified kernel
    target_speedup: float | None = None  # stop once the best is this much faster than torch.compile
    stuck_repeats: int = 4  # the same call this many times in a row draws a warning; twice as many ends the run
    context_tokens: int | None = None
    max_evaluator_failures: int = 3  # evaluation calls in a row that judged nothing: the evaluator is unusable

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class EpisodeState:
    """Everything carried from turn to turn; saved with every turn, so a resume starts from it."""

    turn: int = 0
    elapsed_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    format_errors: int = 0
    since_improvement: int = 0
    repeats: int = 0
    last_action: str | None = None
    best: Best | None = None
    warned: list[str] = field(default_factory=list)
    valid_calls: int = 0  # tool calls that named a tool with well-formed arguments
    invalid_calls: int = 0  # malformed calls and replies with no call at all
    finished: bool = False
    context_budget: int = 0  # the chat driver's current elision budget (it shrinks on overflow)
    head: str = ""  # the git recorder's branch head after the turn (empty without git)
    evaluator_failures: int = 0  # compile/verify/profile calls in a row that judged nothing
    evaluator_error: str = ""  # what the last of them said

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def from_dict(cls, d: dict) -> EpisodeState:
        state = cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
        if isinstance(state.best, dict):
            state.best = Best.from_dict(state.best)
        return state


@dataclass
class TaskInfo:
    """What the prompts say about the task."""

    name: str
    source: str


@dataclass
class Turn:
    """What one act() did: the messages the history gained (notices, the reply, observations), the actions."""

    number: int
    started: float
    seconds: float
    reply: dict  # reply_record(): text, calls, usage, and the sampled ids of a token-level policy
    actions: list[dict]
    added: list[dict]  # every message appended to the history this turn, in order
    observations: list[dict]  # the tool/user messages the episode itself added after the reply
    finished: bool = False

    @property
    def improved(self) -> bool:
        return any(a.get("improved") for a in self.actions)


@dataclass
class EpisodeResult:
    end_reason: str
    error: str | None
    state: EpisodeState
    messages: list[dict]
    best: Best | None  # the best verified kernel of the run, as judged during it
    best_files: Snapshot | None
    final: Verdict | None  # the best kernel re-evaluated from its own files at the end
    final_error: str | None = None  # why that re-evaluation could not be made

    @property
    def tier(self) -> int:
        """The episode's reward tier: the final re-evaluation's where there was one, else the best kernel's (-1
        without one)."""
        if self.final is not None:
            return self.final.tier
        return self.best.tier if self.best else -1

    def best_summary(self) -> dict | None:
        """The best kernel as a run's summary reports it: the final re-evaluation's figures, the in-run ones beside."""
        if self.best is None:
            return None
        keys = ("tier", "speedup_vs_eager", "speedup_vs_compile")
        summary = {k: getattr(self.best, k) for k in ("commit", "turn", "tag", *keys)}
        if self.final is not None:  # the pristine re-evaluation is the figure we stand behind
            summary["in_run"] = {k: getattr(self.best, k) for k in keys}
            summary.update({k: getattr(self.final, k) for k in keys})
        return summary

    def final_summary(self) -> dict | None:
        """The final re-evaluation as a run's summary reports it (or why it failed)."""
        commit = self.best.commit if self.best else None
        if self.final_error is not None:
            return {"error": self.final_error, "commit": commit}
        if self.final is None:
            return None
        v = self.final
        return {
            "correct": v.correct,
            "tier": v.tier,
            "speedup_vs_eager": v.speedup_vs_eager,
            "speedup_vs_compile": v.speedup_vs_compile,
            "time_ms": v.time_ms,
            "violations": [x.to_dict() for x in v.violations],
            "summary": v.summary(),
            "commit": commit,
        }

    def metrics(self) -> dict:
        s = self.state
        total = s.valid_calls + s.invalid_calls
        return {
            "turns": s.turn,
            "end_reason": self.end_reason,
            "tier": self.tier,
            "valid_calls": s.valid_calls,
            "invalid_calls": s.invalid_calls,
            "tool_validity": s.valid_calls / total if total else 0.0,
        }


def opening_messages(
    prompts,
    task: TaskInfo,
    env: dict,
    skills: list,
    limits: EpisodeLimits,
    action_format: str,
    workspace: str,
    baselines: dict | None = None,
) -> list[dict]:
    """The system and task messages an episode opens with (also what `cudagent data export` writes as prompts)."""
    system = prompts.render(
        "system", env=env, skills=skills, tools=TOOL_SPECS, limits=limits.to_dict(), action_format=action_format
    )
    user = prompts.render(
        "task", task={"name": task.name, "source": task.source}, workspace=workspace, baseline=baselines
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class Episode:
    def __init__(
        self,
        task: TaskInfo,
        toolbox: Toolbox,
        evaluator: EvaluatorPort,
        limits: EpisodeLimits,
        *,
        action_format: str,
        env: dict,
        skills: list[Skill],
        prompts: Prompts | None = None,
        model: str = "",
        state: EpisodeState | None = None,
        messages: list[dict] | None = None,
        best_files: Snapshot | None = None,
        on_improvement=None,
        baselines: dict | None = None,
    ):
        """`state`, `messages` and `best_files` resume an episode; `on_improvement(best) -> dict` is told of every
        better verified kernel and may add fields to it (a commit, a tag)."""
        self.task, self.toolbox, self.evaluator, self.limits = task, toolbox, evaluator, limits
        self.action_format, self.env, self.skills = action_format, env, skills
        self.prompts = prompts or Prompts()
        self.model = model
        self.state = state or EpisodeState()
        self.messages: list[dict] = list(messages) if messages is not None else self.opening(baselines)
        self.best_files = best_files
        self.on_improvement = on_improvement
        self.on_call = None  # told (turn, "compile") as each tool call starts: a progress line for a person
        self.pending: list[dict] = []  # notices not yet part of a turn
        self._clock_start = time.monotonic()
        self._elapsed_at_start = self.state.elapsed_s

    # ----- opening ----------------------------------------------------------------------------------------------

    def opening(self, baselines: dict | None = None) -> list[dict]:
        return opening_messages(
            self.prompts,
            self.task,
            self.env,
            self.skills,
            self.limits,
            self.action_format,
            str(self.toolbox.ws.root),
            baselines,
        )

    # ----- a turn -----------------------------------------------------------------------------------------------

    def tell(self, text: str) -> None:
        """A notice from outside the turn's tool calls (a recorder's), read by the model with the next turn."""
        self.pending.append({"role": "user", "content": self.prompts.render("notice", text=text)})

    def recorded(self, extra: dict) -> None:
        """What the recorders said of a turn: a notice among it is told to the model."""
        if extra.get("notice"):
            self.tell(extra["notice"])

    def notices(self) -> list[str]:
        """Limit warnings due now (each once), by reason; their messages join the history at the next turn."""
        s, lim = self.state, self.limits
        near = []
        turns_left = lim.max_turns - s.turn
        if turns_left <= 3 and lim.max_turns > 6:
            near.append("turns")
        minutes_left = None
        if lim.max_minutes is not None:
            minutes_left = max(0.0, lim.max_minutes - self.elapsed() / 60)
            if minutes_left <= max(2.0, lim.max_minutes * 0.1):
                near.append("time")
        if lim.max_tokens is not None and s.tokens >= 0.9 * lim.max_tokens:
            near.append("tokens")
        if lim.patience is not None and lim.patience > 6 and s.since_improvement >= lim.patience - 3:
            near.append("patience")
        new: list[str] = []
        for reason in near:
            if reason in s.warned:
                continue
            s.warned.append(reason)
            limits = {
                **lim.to_dict(),
                "turns_left": turns_left,
                "minutes_left": int(minutes_left + 0.999) if minutes_left is not None else None,
            }
            text = self.prompts.render("limits", reason=reason, turn=s.turn, best=s.best, limits=limits)
            self.pending.append({"role": "user", "content": text})
            new.append(reason)
        return new

    async def act(self, reply: PolicyReply) -> Turn:
        """Run the reply's tool calls (at most MAX_CALLS_PER_TURN); the history gains the reply and observations."""
        number = self.state.turn + 1
        started = time.time()
        self._count_usage(reply.usage, reply.cost_usd)
        observations: list[dict] = []
        actions: list[dict] = []
        finished = False
        if not reply.tool_calls:
            self.state.format_errors += 1
            self.state.invalid_calls += 1
            text = self.prompts.render(
                "format_error",
                error=reply.format_error or "the reply called no tool",
                action_format=self.action_format,
                tools=TOOL_SPECS,
            )
            observations.append({"role": "user", "content": text})
        else:
            self.state.format_errors = 0
            native = bool(reply.message.get("tool_calls"))
            for i, call in enumerate(reply.tool_calls[:MAX_CALLS_PER_TURN]):
                obs = await self._run(number, call)
                actions.append(self._action_record(number, i, call, obs))
                observations.append(self._observation(number, call, obs, native))
                finished = finished or obs.done
            for call in reply.tool_calls[MAX_CALLS_PER_TURN:]:
                skipped = Observation(f"not run: at most {MAX_CALLS_PER_TURN} tool calls a turn", ok=False)
                observations.append(self._observation(number, call, skipped, native))
        self.state.since_improvement = (
            0 if any(a.get("improved") for a in actions) else self.state.since_improvement + 1
        )
        self.state.turn = number
        self.state.elapsed_s = self.elapsed()
        self.state.finished = self.state.finished or finished
        added = self.pending + [reply.message] + observations
        self.pending = []
        self.messages.extend(added)
        return Turn(
            number,
            started,
            round(time.time() - started, 3),
            reply_record(reply),
            actions,
            added,
            observations,
            finished,
        )

    async def _run(self, turn: int, call: ToolCall) -> Observation:
        if call.error:
            self.state.invalid_calls += 1
            return Observation(f"error: {call.error}", ok=False)
        self.state.valid_calls += 1
        if self.on_call is not None:
            self.on_call(turn, call.name)
        signature = call.name + json.dumps(call.arguments, sort_keys=True)
        digest = hashlib.sha256(signature.encode()).hexdigest()[:16]
        self.state.repeats = self.state.repeats + 1 if digest == self.state.last_action else 1
        self.state.last_action = digest
        obs = await self.toolbox.run(call.name, call.arguments or {})
        if call.name in EVALUATING:
            failed = bool(obs.data.get("evaluator_failed"))
            self.state.evaluator_failures = self.state.evaluator_failures + 1 if failed else 0
            self.state.evaluator_error = obs.text.splitlines()[0] if failed and obs.text else ""
        if self.state.repeats == self.limits.stuck_repeats:
            obs.text += (
                f"\n[note: this is the {self.state.repeats}th identical {call.name} call in a row; its result "
                "will not change. Try something different.]"
            )
        if obs.verdict is not None:
            self._consider(turn, obs)
        return obs

    def _consider(self, turn: int, obs: Observation) -> None:
        """Keep a verdict that beats the best so far, with the files it judged."""
        v = obs.verdict
        if not v.correct:
            return
        candidate = Best.of(turn, v)
        if not is_better(candidate, self.state.best):
            return
        self.best_files = obs.data.get("snapshot") or snapshot_of(self.toolbox.ws)
        if self.on_improvement is not None:
            placed = self.on_improvement(candidate, v) or {}
            candidate.commit, candidate.tag = placed.get("commit"), placed.get("tag")
            if placed.get("notice"):
                obs.text += "\n" + self.prompts.render("notice", text=placed["notice"])
        self.state.best = candidate
        obs.data["improved"] = candidate.commit or True

    def _action_record(self, turn: int, index: int, call: ToolCall, obs: Observation) -> dict:
        record = {
            "tool": call.name,
            "arguments": call.arguments,
            "raw_arguments": call.raw_arguments,
            "error": call.error,
            "ok": obs.ok,
            "seconds": round(obs.seconds, 3),
            "output": obs.text,
        }
        if obs.full_text is not None:
            record["full_output"] = obs.full_text  # recorders that keep files move it out of the record
        if obs.data.get("traceback"):
            record["traceback"] = obs.data["traceback"]  # an error of cudagent's own, for whoever mends it
        if obs.verdict is not None:
            record["verdict"] = obs.verdict.to_dict()
        if obs.data.get("improved"):
            record["improved"] = obs.data["improved"]
        if obs.done:
            record["summary"] = obs.data.get("summary")
        return record

    def _observation(self, turn: int, call: ToolCall, obs: Observation, native: bool) -> dict:
        text = self.prompts.render(
            "observation",
            tool=call.name or "?",
            output=obs.text,
            turn=turn,
            limits=self.limits.to_dict(),
            best=self.state.best,
        )
        if native:
            return {"role": "tool", "tool_call_id": call.id, "content": text}
        return {"role": "user", "content": text}

    def _count_usage(self, usage: Usage, cost: float | None) -> None:
        self.state.prompt_tokens += usage.prompt_tokens
        self.state.completion_tokens += usage.completion_tokens
        if cost is not None:
            self.state.cost_usd = (self.state.cost_usd or 0.0) + cost

    # ----- limits -----------------------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return self._elapsed_at_start + (time.monotonic() - self._clock_start)

    def stop_reason(self) -> str | None:
        s, lim = self.state, self.limits
        if s.finished:
            return "finished"
        if s.turn >= lim.max_turns:
            return "max_turns"
        if lim.max_minutes is not None and self.elapsed() >= lim.max_minutes * 60:
            return "wall_time"
        if lim.max_tokens is not None and s.tokens >= lim.max_tokens:
            return "tokens"
        if s.format_errors >= lim.max_format_errors:
            return "format_errors"
        if s.evaluator_failures >= lim.max_evaluator_failures:
            return "evaluator"
        if lim.patience is not None and s.since_improvement >= lim.patience:
            return "patience"
        if lim.target_speedup is not None and s.best and (s.best.speedup_vs_compile or 0) >= lim.target_speedup:
            return "target_reached"
        if s.repeats >= 2 * lim.stuck_repeats:
            return "stuck"
        return None

    # ----- the end ----------------------------------------------------------------------------------------------

    async def finish(self, reason: str, error: str | None = None, final_evaluation: bool = True) -> EpisodeResult:
        """The best kernel re-evaluated from its own files alone, in a fresh directory with a clean build."""
        self.state.elapsed_s = self.elapsed()
        if reason == "evaluator":
            error = error or f"the evaluator judged nothing {self.state.evaluator_failures} times in a row: "
            error += self.state.evaluator_error
            final_evaluation = False  # it would meet the same evaluator
        final, final_error = None, None
        if final_evaluation and self.state.best and self.best_files:
            try:
                final = await self.evaluator.evaluate(self.best_files, timing=True, fresh=True)
            except Exception as exc:  # noqa: BLE001  (the run's record must survive whatever the final check meets)
                final_error = f"{type(exc).__name__}: {exc}"
        return EpisodeResult(
            reason, error, self.state, self.messages, self.state.best, self.best_files, final, final_error
        )
