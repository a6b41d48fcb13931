"""The token ledger of an episode: exactly what the model saw and sampled, the unit a trainer consumes.

    prompt_ids          the opening (system and task) as the model's chat template renders it
    response_ids        everything after it, in order: sampled tokens and the tokens the loop added
    response_mask       1 for a token the model sampled, 0 for one the loop added (observations, notices)
    response_logprobs   the sampling log-probability of each sampled token; 0.0 where the mask is 0

Training must use these ids as they are: re-tokenizing the decoded text gives other ids, and the importance ratios
of PPO explode on them. The field names are those of verl's AgentLoopOutput.

>>> ledger = Ledger([1, 2])
>>> ledger.add_model([3, 4], [-0.5, -0.25]); ledger.add_observation([5]); ledger.add_model([6], [-1.0])
>>> ledger.add_observation([7, 8]); ledger.trim()
>>> ledger.response_ids, ledger.response_mask, ledger.response_logprobs
([3, 4, 5, 6], [1, 1, 0, 1], [-0.5, -0.25, 0.0, -1.0])
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


class LedgerError(ValueError):
    """The ledger would no longer describe what the model saw."""


@dataclass
class Ledger:
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    def add_model(self, ids: list[int], logprobs: list[float]) -> None:
        if len(ids) != len(logprobs):
            raise LedgerError(f"{len(ids)} sampled tokens came with {len(logprobs)} log-probabilities")
        self.response_ids.extend(ids)
        self.response_mask.extend([1] * len(ids))
        self.response_logprobs.extend(float(x) for x in logprobs)

    def add_observation(self, ids: list[int]) -> None:
        self.response_ids.extend(ids)
        self.response_mask.extend([0] * len(ids))
        self.response_logprobs.extend([0.0] * len(ids))

    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def trim(self) -> None:
        """Drop trailing loop-added tokens: the last response token must be the model's (GAE skips masked
        positions, so a reward put on an observation token is lost)."""
        while self.response_mask and self.response_mask[-1] == 0:
            self.response_ids.pop()
            self.response_mask.pop()
            self.response_logprobs.pop()

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Ledger:
        return cls(
            list(d["prompt_ids"]),
            list(d.get("response_ids", [])),
            list(d.get("response_mask", [])),
            list(d.get("response_logprobs", [])),
        )
