"""`cudagent train status RUN`: what verl's file logger wrote (RUN/metrics.jsonl, one {"step", "data"} per step),
summed up: the stage, the last step, reward and tier figures, turns and tokens, and the BF16 monitors (verl's
rollout-correction metrics: how far the trainer's log-probabilities drift from the rollout engine's)."""

from __future__ import annotations

import json
from pathlib import Path

SHOWN = {
    "reward": ("critic/score/mean", "critic/score/max", "critic/score/min"),
    "turns": ("num_turns/mean", "num_turns/max"),
    "tokens": ("response_length/mean", "prompt_length/mean", "response_length/clip_ratio"),
    "bf16": ("rollout_corr/log_ppl_abs_diff", "rollout_corr/log_ppl_diff_max", "rollout_corr/kl",
             "rollout_corr/rollout_is_mean", "rollout_corr/rollout_is_max"),
}  # fmt: skip


def read_metrics(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill
        rows.append({"step": row.get("step"), **(row.get("data") or {})})
    return rows


def summarize(run_dir: Path) -> dict:
    record = json.loads((run_dir / "command.json").read_text())
    rows = read_metrics(run_dir / "metrics.jsonl")
    summary = {"stage": record["stage"], "model": record["model"], "data": record["data"], "steps": len(rows)}
    if not rows:
        return {**summary, "note": "no step logged yet"}
    last = rows[-1]
    summary["step"] = last["step"]
    for group, keys in SHOWN.items():
        summary[group] = {k: last[k] for k in keys if k in last}
    summary["reward_by_step"] = [[r["step"], r["critic/score/mean"]] for r in rows if "critic/score/mean" in r]
    return summary
