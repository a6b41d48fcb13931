"""verl's own check of a composed RL stage config, as `verl.trainer.main_ppo` runs it at launch: `validate_config`
with the reference policy and the critic the config asks for. One of the two modules of cudagent that import verl
(the other is the rollout adapter, agent_loop.py); `cudagent train` calls it before launching and in `--dry-run`.
"""

from __future__ import annotations

import contextlib
import io
import warnings

from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config


def validate(config) -> None:
    """Raise what verl raises for a config it would refuse. verl prints its progress and warns of the tokenizer's
    padding: both are swallowed here (stdout is the command's, stderr one sentence)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate_config(config, need_reference_policy(config), need_critic(config))
