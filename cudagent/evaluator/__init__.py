"""The trusted evaluator: correctness on fresh random inputs, anti-cheating audits, honest timing, reward tiers.

The same evaluator scores `cudagent check`, the agent's verify/profile tools, `cudagent bench` and training, always
through the evaluator port (port.py): where.py chooses this machine (local.py) or `cudagent serve` services
(remote.py), and nothing else constructs an evaluator.

Its files, by concern:

    port.py, local.py, remote.py, where.py   the port: how everything else reaches an evaluator
    evaluator.py                             the order of an evaluation and the life of its processes
    jail/                                    where candidate code is built and run: the trust boundary
    audit/                                   what a candidate may contain and do, before and while it runs
    build/                                   the trusted build of a candidate, into its hand-in
    timing/                                  baselines, the candidate's timing and its checks
    child.py, wire.py                        the harness in the candidate's process and the channel to it
    verify.py, trials.py, judge.py, compare.py, transforms.py   the trials and how a call is judged
    verdict.py, codes.py, report.py          the verdict

The names below are imported on first use: importing the package itself imports no torch, so that the candidate's
process (jail/entry.py) can enter its jail before anything starts a thread.
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
