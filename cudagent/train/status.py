"""`cudagent train status RUN`: a training run's progress from what it wrote.

    RUN/command.json    the stage and the command (`cudagent train` writes it), with episodes per step
    RUN/metrics.jsonl   verl's file logger: one {"step", "data"} per step (scores, lengths, rollout correction)
    RUN/rollouts.jsonl  the agent loop: one record per episode (tier, reward, turns, tool validity, the smallest
                        sampled-token probability), in the order they finished

Episodes are assigned to steps in order, `episodes_per_step` at a time (the synchronous trainer generates exactly
one batch per step). The summary gives the last step, the monitors and the stop rule's verdict; `progress.png` plots
the mean reward and the faster-than-compile rate per step.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from cudagent.train.monitor import StopRule, breaches, stop_reason

VERL_KEYS = (
    "critic/score/mean",
    "num_turns/mean",
    "response_length/mean",
    "rollout_corr/rollout_rs_token_k1_max",
    "rollout_corr/rollout_rs_token_k1_min",
    "rollout_corr/log_ppl_diff_max",
    "rollout_corr/log_ppl_abs_diff",
    "rollout_corr/rollout_is_ratio_fraction_high",
    "rollout_corr/kl",
)


def _jsonl(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a kill
    return rows


def steps(run_dir: Path) -> list[dict]:
    """One row per logged step: verl's figures and those of the step's episodes."""
    record = json.loads((run_dir / "command.json").read_text())
    metrics = [{"step": r.get("step"), **(r.get("data") or {})} for r in _jsonl(run_dir / "metrics.jsonl")]
    episodes = sorted(_jsonl(run_dir / "rollouts.jsonl"), key=lambda e: e.get("t", 0))
    per_step = record.get("episodes_per_step") or (len(episodes) // max(1, len(metrics)) or 1)
    rows = []
    for i, m in enumerate(metrics):
        row = {"step": m["step"], **{k: m[k] for k in VERL_KEYS if k in m}}
        mine = episodes[i * per_step : (i + 1) * per_step]
        if mine:
            row.update(
                episodes=len(mine),
                reward_mean=round(statistics.fmean(e["reward"] for e in mine), 4),
                faster_than_compile=round(statistics.fmean(e["faster_than_compile"] for e in mine), 4),
                tiers={str(t): sum(1 for e in mine if e["tier"] == t) for t in (-1, 1, 2, 3)},
                turns_mean=round(statistics.fmean(e["turns"] for e in mine), 2),
                tool_validity=round(statistics.fmean(e["tool_validity"] for e in mine), 4),
                min_token_prob=min(e["min_token_prob"] for e in mine),
            )
        rows.append(row)
    return rows


def summarize(run_dir: Path, rule: StopRule | None = None, png: bool = True) -> dict:
    rule = rule or StopRule()
    record = json.loads((run_dir / "command.json").read_text())
    rows = steps(run_dir)
    summary = {"stage": record["stage"], "model": record["model"], "data": record["data"], "steps": len(rows),
               "episodes": len(_jsonl(run_dir / "rollouts.jsonl"))}  # fmt: skip
    if not rows:
        return {**summary, "note": "no step logged yet"}
    summary["last"] = rows[-1]
    summary["monitors"] = {"breaches": breaches(rows[-1], rule), "stop": stop_reason(rows, rule)}
    if png:
        from cudagent.png import series_plot

        reward = [r.get("reward_mean", r.get("critic/score/mean", 0.0)) for r in rows]
        faster = [r.get("faster_than_compile", 0.0) for r in rows]
        series_plot({"reward": reward, "faster_than_compile": faster}, str(run_dir / "progress.png"), -1.0, 3.0)
        summary["plot"] = str(run_dir / "progress.png")
    return summary
