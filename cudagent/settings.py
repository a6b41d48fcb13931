"""Settings the environment may give, read in one place (the CLI) and passed down explicitly.

    CUDAGENT_HOME                 where runs are kept (default $XDG_DATA_HOME/cudagent, ~/.local/share/cudagent)
    CUDAGENT_FORK_SERVER=0        start every candidate process anew instead of forking it from a zygote
    CUDAGENT_CONFINE              strict | best-effort (default) | off: confinement of candidate processes (confine.py)
    CUDAGENT_PRICE_INPUT/OUTPUT   dollars per million prompt/completion tokens, to report a run's cost

Build and baseline caches (CUDAGENT_CACHE_DIR) are located by cudagent.resources, which every process of an
evaluation (parent, workers, zygote) must agree on without being told; CUDAGENT_BUILD_CACHE=0 turns the compiler
cache of workspace builds off (build/objcache.py), read by the compile command itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    home: Path
    fork_server: bool = True
    prices_per_mtok: tuple[float, float] | None = None
    confine: str = "best-effort"

    @property
    def runs_root(self) -> Path:
        return self.home / "runs"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        home = env.get("CUDAGENT_HOME") or os.path.join(
            env.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "cudagent"
        )
        prices = None
        if env.get("CUDAGENT_PRICE_INPUT") and env.get("CUDAGENT_PRICE_OUTPUT"):
            prices = (float(env["CUDAGENT_PRICE_INPUT"]), float(env["CUDAGENT_PRICE_OUTPUT"]))
        confine = env.get("CUDAGENT_CONFINE") or "best-effort"
        if confine not in ("strict", "best-effort", "off"):
            from cudagent.errors import CudagentError

            raise CudagentError(f"CUDAGENT_CONFINE={confine!r} is not a level; use strict, best-effort or off")
        return cls(Path(home).resolve(), env.get("CUDAGENT_FORK_SERVER") != "0", prices, confine)
