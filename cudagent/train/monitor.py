"""The BF16 monitors of a training run and the rule that stops it when they blow up.

Two signals come before a collapse like the CUDA Agent paper's at step 17 (CUDA tokens have probabilities near 1e-9
in BF16, and importance ratios explode):

    train/rollout gap     how far the trainer's log-probabilities of the sampled tokens drift from the rollout
                          engine's, per step, from verl's rollout-correction metrics: the largest |log(pi_train/
                          pi_rollout)| over the step's tokens (`rollout_corr/rollout_rs_token_k1_max` and `_min`, of
                          the never-rejecting token_k1 trust region the stage configs turn on; without it, the
                          per-sequence `rollout_corr/log_ppl_diff_max`), and the share of tokens whose importance
                          ratio passed the clamp (`rollout_corr/rollout_is_ratio_fraction_high`)
    smallest probability  the smallest probability the rollout engine gave a token it sampled, per step, from the
                          episodes the agent loop records (RUN/rollouts.jsonl)

Rows are one per step: {"step", "rollout_corr/...", "min_token_prob", ...} (status.steps builds them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StopRule:
    max_token_log_ratio: float = 2.0  # largest per-token |log ratio| (a probability 7x off); BF16 noise stays < 1
    max_log_ppl_diff: float = 0.5  # largest per-sequence |mean log ratio|; BF16 noise is around 1e-3
    max_fraction_clamped: float = 0.2  # share of tokens whose importance ratio passed the clamp
    min_token_prob: float = 1e-12  # smallest sampled-token probability of the step
    patience: int = 2  # consecutive steps over a limit before stopping


def breaches(row: dict, rule: StopRule) -> list[str]:
    """What in one step's row is past the rule's limits.

    >>> k1 = "rollout_corr/rollout_rs_token_k1"
    >>> breaches({f"{k1}_max": 0.3, f"{k1}_min": -2.5}, StopRule())
    ['largest |log(pi_train/pi_rollout)| 2.5 > 2']
    >>> breaches({"rollout_corr/log_ppl_diff_max": -0.9, "min_token_prob": 1e-15}, StopRule())
    ['largest |log(pi_train/pi_rollout)| 0.9 > 0.5', 'smallest sampled-token probability 1e-15 < 1e-12']
    """
    out = []
    token_extremes = [row.get(f"rollout_corr/rollout_rs_token_k1_{end}") for end in ("max", "min")]
    if any(v is not None for v in token_extremes):
        gap = max(abs(v) for v in token_extremes if v is not None)
        if gap > rule.max_token_log_ratio:
            out.append(f"largest |log(pi_train/pi_rollout)| {gap:.3g} > {rule.max_token_log_ratio:g}")
    gap = row.get("rollout_corr/log_ppl_diff_max")
    if gap is not None and abs(gap) > rule.max_log_ppl_diff and not out:
        out.append(f"largest |log(pi_train/pi_rollout)| {abs(gap):.3g} > {rule.max_log_ppl_diff:g}")
    clamped = row.get("rollout_corr/rollout_is_ratio_fraction_high")
    if clamped is not None and clamped > rule.max_fraction_clamped:
        out.append(f"tokens past the importance-ratio clamp {clamped:.3g} > {rule.max_fraction_clamped:g}")
    low = row.get("min_token_prob")
    if low is not None and low < rule.min_token_prob:
        out.append(f"smallest sampled-token probability {low:.3g} < {rule.min_token_prob:g}")
    return out


def stop_reason(rows: list[dict], rule: StopRule) -> str | None:
    """Why to stop, when the last `patience` steps all breach the rule; None otherwise.

    >>> ok, bad = {"step": 1, "rollout_corr/log_ppl_diff_max": 0.01}, {"step": 2, "rollout_corr/log_ppl_diff_max": 2.0}
    >>> stop_reason([ok, bad], StopRule()) is None  # one step over: not yet
    True
    >>> stop_reason([ok, bad, {**bad, "step": 3}], StopRule())
    'steps 2-3: largest |log(pi_train/pi_rollout)| 2 > 0.5'
    """
    last = rows[-rule.patience :]
    if len(last) < rule.patience:
        return None
    found = [breaches(r, rule) for r in last]
    if not all(found):
        return None
    return f"steps {last[0].get('step')}-{last[-1].get('step')}: {'; '.join(found[-1])}"
