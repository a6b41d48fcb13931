"""The trusted evaluator: correctness on fresh random inputs, anti-cheating audits, honest timing, reward tiers.

The same evaluator scores `cudagent check`, the agent's verify/profile tools, `cudagent bench` and training, always
through the evaluator port (port.py): where.py chooses this machine (local.py) or `cudagent serve` services
(remote.py), and nothing else constructs an evaluator.

The names below are imported on first use: importing the package itself imports no torch, so that the candidate's
process (entry.py) can confine itself before anything starts a thread.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Tolerance": "cudagent.evaluator.compare",
    "EvalOptions": "cudagent.evaluator.evaluator",
    "Evaluator": "cudagent.evaluator.evaluator",
    "Verdict": "cudagent.evaluator.verdict",
    "Violation": "cudagent.evaluator.verdict",
    "reward_tier": "cudagent.evaluator.verdict",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
