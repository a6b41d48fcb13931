"""The reward an episode earns: its evaluator tier, the paper's -1/1/2/3, unchanged.

    -1  no correct kernel (or none at all)
     1  correct, not 5% faster than eager
     2  correct and 5% faster than eager, not than torch.compile
     3  correct and 5% faster than both

The tier is computed by the evaluator (the same one `optimize` and `bench` trust); the shaping here only decides what
an episode without a judged kernel gets, so that RL cannot earn more by ending early or breaking the format.

>>> reward_of(3, "finished")
3.0
>>> reward_of(-1, "max_turns")
-1.0
>>> reward_of(None, "format_errors")  # nothing judged: the lowest reward, never a neutral one
-1.0
>>> reward_of(2, "policy_error")
Traceback (most recent call last):
...
ValueError: the model server failed (policy_error): that is not the policy's doing, so the episode has no reward
"""

from __future__ import annotations

TIERS = (-1, 1, 2, 3)
NOT_THE_POLICYS_DOING = ("policy_error",)  # the model server failed: the rollout must fail, not score


def reward_of(tier: int | None, end_reason: str) -> float:
    """The episode's reward from its tier (None: nothing judged) and why it ended."""
    if end_reason in NOT_THE_POLICYS_DOING:
        raise ValueError(
            f"the model server failed ({end_reason}): that is not the policy's doing, so the episode has no reward"
        )
    if tier is None:
        return -1.0
    if tier not in TIERS:
        raise ValueError(f"tier {tier} is not one of {TIERS}")
    return float(tier)
