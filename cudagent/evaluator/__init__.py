"""The trusted evaluator: correctness on fresh random inputs, anti-cheating audits, honest timing, reward tiers.

The same evaluator scores `cudagent check`, the agent's verify/profile tools, `cudagent bench` and training, always
through the evaluator port (port.py): where.py chooses this machine (local.py) or `cudagent serve` services
(remote.py), and nothing else constructs an evaluator.
"""

from cudagent.evaluator.compare import Tolerance
from cudagent.evaluator.evaluator import EvalOptions, Evaluator
from cudagent.evaluator.verdict import Verdict, Violation, reward_tier

__all__ = ["EvalOptions", "Evaluator", "Tolerance", "Verdict", "Violation", "reward_tier"]
