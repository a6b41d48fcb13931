"""Where candidates are judged: the one place that chooses between this machine and `cudagent serve` services.

    evaluators(urls=None, device="auto")        this machine's device (a CUDA GPU, else the CPU)
    evaluators(["http://gpu-host:8765"])        the services; the token from CUDAGENT_EVALUATOR_TOKEN or the file a
                                                service on this machine wrote

optimize, bench, check, serve's workers and train all call this; none constructs an evaluator itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from cudagent.errors import CudagentError
from cudagent.evaluator.evaluator import EvalOptions
from cudagent.evaluator.port import Evaluators

DEFAULT_RETRY_S = 180.0


def evaluators(
    urls: list[str] | str | None = None,
    *,
    device: str = "auto",
    options: EvalOptions | None = None,
    scratch_root: Path | None = None,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> Evaluators:
    """The services at `urls` (a list, or one comma-separated string) when given, else this machine's `device`
    (auto, cuda or cpu) evaluating with `options`. A device that is not there, or a service without its token, is
    one sentence here."""
    environ = os.environ if environ is None else environ
    if isinstance(urls, str):
        urls = [u for u in urls.split(",") if u.strip()]
    if urls:
        return _remote(list(urls), environ, home)
    from cudagent.device.info import resolve_device
    from cudagent.evaluator.local import LocalEvaluators

    return LocalEvaluators(resolve_device(device), options, scratch_root)


def _remote(urls: list[str], environ: Mapping[str, str], home: Path | None) -> Evaluators:
    from cudagent.evaluator.remote import EvaluatorPool, token_from
    from cudagent.settings import Settings

    home = home or Settings.from_env(environ).home
    retry = environ.get("CUDAGENT_EVALUATOR_RETRY_S")
    try:
        window = float(retry) if retry else DEFAULT_RETRY_S
    except ValueError:
        raise CudagentError(f"CUDAGENT_EVALUATOR_RETRY_S={retry!r} must be a number of seconds") from None
    return EvaluatorPool(urls, token_from(environ, home) or "", retry_window_s=window)
