"""`cudagent optimize` in token mode: the same run (branch, commits, trajectory, review commands, --resume), with
the token driver over a local Hugging Face model (`--model hf:PATH`) or a vLLM server (`--token-mode`). The
trajectory keeps the ledger beside the messages: each turn's record holds the ids added before the reply
(`observation_ids`) and the sampled ids with their log-probabilities; the first one also the prompt's ids.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from cudagent.agent.ledger import Ledger
from cudagent.agent.runner import RunOptions, drive, new_run, reopen_run
from cudagent.agent.token_driver import TokenDriver
from cudagent.errors import EnvironmentProblem

DEFAULT_CONTEXT_TOKENS = 8192


@dataclass
class TokenSettings:
    model: str  # "hf:PATH" (a local model) or a model name on a vLLM server
    base_url: str | None = None  # the vLLM server, for a served model
    tokenizer: str | None = None  # the tokenizer (a directory or .gguf); default: the hf: path
    api_key: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    reply_tokens: int = 1024
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    seed: int | None = None

    @property
    def local_path(self) -> str | None:
        return self.model[3:] if self.model.startswith("hf:") else None

    def recorded(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "api_key"}


class TokenModel:
    """What a run needs of its model before anything exists: load it (or reach it), say what it is."""

    action_format = "text"  # calls are parsed from the sampled text

    def __init__(self, settings: TokenSettings):
        self.settings = settings
        self.backend = self.renderer = None

    @property
    def model(self) -> str:
        return self.settings.model

    def prepare(self) -> None:
        from cudagent.agent.backends import CompletionsBackend, HFBackend, load_tokenizer
        from cudagent.agent.renderer import ChatRenderer

        s = self.settings
        try:
            if s.local_path:
                self.backend = HFBackend(s.local_path, seed=s.seed)
                tokenizer = self.backend.tokenizer
            else:
                if not s.base_url or not s.tokenizer:
                    raise EnvironmentProblem(
                        "token mode against a server needs --base-url (a vLLM server) and --tokenizer (the model's "
                        "tokenizer directory or .gguf file)"
                    )
                tokenizer = load_tokenizer(s.tokenizer)
                self.backend = CompletionsBackend(s.base_url, None if s.model == "auto" else s.model, s.api_key)
            self.renderer = ChatRenderer(tokenizer)
        except (OSError, ValueError, ImportError) as exc:
            raise EnvironmentProblem(f"the model {s.model} cannot be loaded: {exc}") from exc

    def describe(self) -> dict:
        described = self.backend.describe() if self.backend is not None else {}
        return {**described, "kind": "token", "backend": described.get("kind"), "model": self.settings.model}

    def driver(self, run, final_evaluation: bool, **resume) -> TokenDriver:
        s = self.settings
        return TokenDriver(
            run.episode,
            self.backend,
            self.renderer,
            run.recorders,
            context_tokens=s.context_tokens,
            reply_tokens=s.reply_tokens,
            sampling={"temperature": s.temperature, "top_p": s.top_p},
            request_id=run.run_id,
            final_evaluation=final_evaluation,
            **resume,
        )


def start_token_run(task_path, settings: TokenSettings, options: RunOptions, reporter) -> dict:
    model = TokenModel(settings)
    run = new_run(task_path, options, reporter, model, {"driver": "token", "token_settings": settings.recorded()})
    driver = model.driver(run, options.final_evaluation)
    summary = drive(run, driver, reporter, settings.model)
    return {**summary, "ledger": _ledger_counts(driver.ledger)}


def resume_token_run(traj, options: RunOptions, limit_overrides: dict, reporter, lock) -> dict:
    model = TokenModel(TokenSettings(**traj.header["token_settings"]))
    run = reopen_run(traj, options, limit_overrides, reporter, model, lock)
    ledger, rendered, stopped = rebuild_ledger(traj.turns, len(run.episode.messages), model.renderer.stop_ids)
    resume = {"ledger": ledger, "rendered": rendered, "model_stopped": stopped} if ledger is not None else {}
    driver = model.driver(run, options.final_evaluation, **resume)
    summary = drive(run, driver, reporter, model.model)
    return {**summary, "ledger": _ledger_counts(driver.ledger)}


def rebuild_ledger(turns: list[dict], n_messages: int, stop_ids: set[int]) -> tuple[Ledger | None, int, bool]:
    """The ledger, the number of messages it holds and whether the model's last reply ended on an end token,
    from the turn records of a trajectory (None when no turn was recorded)."""
    if not turns:
        return None, n_messages, True
    ledger = Ledger(list(turns[0]["reply"]["prompt_ids"]))
    for t in turns:
        ledger.add_observation(t["reply"].get("observation_ids", []))
        ledger.add_model(t["reply"]["token_ids"], t["reply"]["logprobs"])
    last = turns[-1]
    added = last["messages"]
    reply_at = max(i for i, m in enumerate(added) if m.get("role") == "assistant")
    observations = len(added) - reply_at - 1
    ids = last["reply"]["token_ids"]
    return ledger, n_messages - observations, bool(ids) and ids[-1] in stop_ids


def ledger_of_run(traj) -> dict:
    """A finished token-mode run as one training row (verl's AgentLoopOutput fields, plus what it was)."""
    if traj.header.get("driver") != "token":
        raise EnvironmentProblem(f"{traj.run_dir.name} is not a token-mode run; it has no ledger")
    if not traj.turns:
        raise EnvironmentProblem(f"{traj.run_dir.name} has no turns yet; it has no ledger")
    ledger, _, _ = rebuild_ledger(traj.turns, 0, set())
    ledger.trim()
    end = traj.ends[-1] if traj.ends else {}
    summary = end.get("summary") or {}
    best = summary.get("best") or {}
    return {
        "run_id": traj.header["run_id"],
        "task": traj.header["task"]["name"],
        "model": traj.header["token_settings"]["model"],
        **ledger.to_dict(),
        "num_turns": len(traj.turns),
        "reward_score": best.get("tier", -1) if summary else None,
        "end_reason": end.get("exit_reason"),
    }


def _ledger_counts(ledger: Ledger) -> dict:
    return {
        "prompt_tokens": len(ledger.prompt_ids),
        "response_tokens": len(ledger.response_ids),
        "sampled_tokens": sum(ledger.response_mask),
    }
