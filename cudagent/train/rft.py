"""Rejection fine-tuning: keep the sampled episodes worth imitating, and feed their exact token ids to verl's SFT
trainer.

    collect(rows, samples, ...)     K episodes per task of a verl dataset with a served model (vLLM's token API),
                                    each run and scored as the training rollout runs it
    episodes_from_runs(runs root)   the ledger, tier and tool validity of each token-mode `optimize` run
    keep(episode)                   reward > 0 and valid tool use (the paper's filter)
    write_episodes(episodes, path)  JSON lines, one kept episode each (the `rft` stage's --data)
    LedgerSFTDataset                verl's `data.custom_cls`: yields what its MultiTurnSFTDataset yields
                                    (input_ids, position_ids, loss_mask; attention_mask when right-padded), built from
                                    the ledger's ids as sampled, never from re-tokenized text (its ids differ)

The loss mask is the ledger's response mask: 1 on the tokens the model sampled, 0 on the prompt and on every token the
loop added (observations, notices), as MultiTurnSFTDataset masks everything but assistant turns.
"""

from __future__ import annotations

import json
from pathlib import Path

MIN_TOOL_VALIDITY = 1.0  # every call well-formed: the paper keeps only episodes with valid tool use


def keep(episode: dict) -> bool:
    """An episode worth imitating: it earned a positive reward and all its tool calls were valid.

    >>> keep({"tier": 3, "tool_validity": 1.0})
    True
    >>> keep({"tier": 1, "tool_validity": 0.9}), keep({"tier": -1, "tool_validity": 1.0})
    (False, False)
    """
    return episode.get("tier", -1) > 0 and episode.get("tool_validity", 0.0) >= MIN_TOOL_VALIDITY


async def collect(rows: list[dict], samples: int, backend, tokenizer, pool, settings, sampling: dict,
                  concurrency: int = 8, on_episode=None) -> list[dict]:  # fmt: skip
    """`samples` episodes of each row's task (rows: `extra_info` dicts), at most `concurrency` at once; an episode
    that could not run (the evaluator gone, a bad row) is recorded with its error and reward None."""
    import asyncio

    from cudagent.errors import CudagentError
    from cudagent.train.rollout import rollout

    gate = asyncio.Semaphore(concurrency)

    async def one(row: dict, sample: int) -> dict:
        async with gate:
            try:
                r = await rollout(row, backend, tokenizer, settings, pool, sampling)
            except CudagentError as exc:
                episode = {"task": row.get("task_id"), "sample": sample, "reward": None, "error": exc.message}
            else:
                episode = {"task": r.task, "sample": sample, "reward": r.reward, "tier": r.metrics["tier"],
                           "tool_validity": r.metrics["tool_validity"], "end_reason": r.end_reason,
                           **r.ledger.to_dict()}  # fmt: skip
        if on_episode:
            on_episode(episode)
        return episode

    return list(await asyncio.gather(*(one(row, k) for row in rows for k in range(samples))))


def episodes_from_runs(runs_root: Path) -> list[dict]:
    """Every token-mode run under `runs_root` (trajectories with a ledger) as an episode record."""
    from cudagent.agent.token_run import rebuild_ledger
    from cudagent.agent.trajectory import Trajectory

    episodes = []
    for run_dir in sorted(p for p in Path(runs_root).iterdir() if (p / "trajectory.jsonl").is_file()):
        traj = Trajectory.load(run_dir)
        if traj.header.get("driver") != "token" or not traj.turns:
            continue
        ledger, _, _ = rebuild_ledger(traj.turns, len(traj.header["messages"]), set())
        ledger.trim()
        end = traj.ends[-1] if traj.ends else {}
        state = end.get("state") or traj.last_state
        valid, invalid = state.get("valid_calls", 0), state.get("invalid_calls", 0)
        # the final re-evaluation's tier (the run's summary), else the in-run verdict's
        best = (end.get("summary") or {}).get("best") or state.get("best") or {}
        episodes.append(
            {
                "run_id": traj.header["run_id"],
                "task": traj.header["task"]["name"],
                "tier": int(best.get("tier", -1)) if best else -1,
                "tool_validity": valid / (valid + invalid) if valid + invalid else 0.0,
                **ledger.to_dict(),
            }
        )
    return episodes


def write_episodes(episodes: list[dict], path: Path) -> int:
    """The kept episodes as JSON lines; how many were kept."""
    kept = [e for e in episodes if keep(e)]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(e) + "\n" for e in kept))
    tmp.replace(path)
    return len(kept)


def read_episodes(paths) -> list[dict]:
    rows = []
    for p in [paths] if isinstance(paths, (str, Path)) else list(paths):
        rows += [json.loads(line) for line in Path(p).read_text().splitlines() if line.strip()]
    return rows


try:  # verl's trainer gives its dataset class a torch Dataset's interface; torch is a dependency of cudagent
    from torch.utils.data import Dataset as _Dataset
except ImportError:  # pragma: no cover
    _Dataset = object


class LedgerSFTDataset(_Dataset):
    """verl's `data.custom_cls` for the `rft` stage: constructed as verl constructs MultiTurnSFTDataset
    (files, tokenizer, config, ...), over JSON lines of kept episodes."""

    def __init__(self, parquet_files, tokenizer, config, processor=None, max_samples: int = -1, **kwargs):
        self.tokenizer = tokenizer
        self.max_length = int(config.get("max_length", 1024))
        self.truncation = config.get("truncation", "error")
        self.pad_mode = str(config.get("pad_mode", "no_padding")).lower()
        self.episodes = [e for e in read_episodes(parquet_files) if keep(e)]
        if max_samples and max_samples > 0:
            self.episodes = self.episodes[:max_samples]

    def __len__(self) -> int:
        return len(self.episodes)

    def __getitem__(self, i: int) -> dict:
        import torch

        e = self.episodes[i]
        ids = list(e["prompt_ids"]) + list(e["response_ids"])
        mask = [0] * len(e["prompt_ids"]) + list(e["response_mask"])
        if len(ids) > self.max_length:
            if self.truncation == "error":
                raise ValueError(f"episode {e.get('run_id', i)} is {len(ids)} tokens, over data.max_length")
            ids, mask = (ids[-self.max_length :], mask[-self.max_length :]) if self.truncation == "left" else (
                ids[: self.max_length], mask[: self.max_length])  # fmt: skip
        input_ids = torch.tensor(ids, dtype=torch.long)
        loss_mask = torch.tensor(mask, dtype=torch.long)
        position_ids = torch.arange(len(ids), dtype=torch.long)
        if self.pad_mode != "right":
            return {"input_ids": input_ids, "position_ids": position_ids, "loss_mask": loss_mask}
        pad = self.max_length - len(ids)
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return {
            "input_ids": torch.cat([input_ids, torch.full((pad,), pad_id, dtype=torch.long)]),
            "attention_mask": torch.cat([torch.ones(len(ids), dtype=torch.long), torch.zeros(pad, dtype=torch.long)]),
            "position_ids": torch.cat([position_ids, torch.zeros(pad, dtype=torch.long)]),
            "loss_mask": torch.cat([loss_mask, torch.zeros(pad, dtype=torch.long)]),
        }
