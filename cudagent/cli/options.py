"""What several commands share: their options' checks and the environment they read. Command modules import this,
never each other."""

from __future__ import annotations

import typer

ENV_HELP = (
    "Environment: OPENAI_BASE_URL (the server, e.g. http://localhost:8000/v1 for vLLM), OPENAI_API_KEY, "
    "CUDAGENT_HOME (where runs are kept, default ~/.local/share/cudagent), CUDAGENT_CACHE_DIR (builds, baselines), "
    "CUDAGENT_PRICE_INPUT / CUDAGENT_PRICE_OUTPUT (dollars per million tokens, to report cost), "
    "CUDAGENT_EVALUATOR_URL / CUDAGENT_EVALUATOR_TOKEN (a `cudagent serve` service to evaluate on), "
    "CUDAGENT_CONFINE (the default of --confine)."
)
DEVICES = ("auto", "cuda", "cpu")


def _device(value: str) -> str:
    if value not in DEVICES:
        raise typer.BadParameter(f"{value!r} is not a device; use auto, cuda or cpu")
    return value


DTYPES = ("float32", "bfloat16", "float16")


def _dtype(value: str | None) -> str | None:
    if value is not None and value not in DTYPES:
        raise typer.BadParameter("one of float32, bfloat16, float16")
    return value


def dtype_option(panel: str | None = None):
    """--dtype: the dtype a user's model runs in (its floating weights and inputs), checked alike everywhere."""
    return typer.Option(
        None,
        help="Run the model in this dtype (bfloat16, float16, float32): its floating weights and inputs, as users run "
        "models.",
        callback=_dtype,
        rich_help_panel=panel,
        show_default=False,
    )


def device_option(help_text: str):
    """--device auto|cuda|cpu, refused in one sentence of ours (not the validator's wording) when it is neither."""
    return typer.Option("auto", help=help_text, metavar="auto|cuda|cpu", callback=_device)


CONFINE_LEVELS = ("strict", "best-effort", "off")


def _confine(value: str | None) -> str | None:
    """--confine: checked, then handed to every process of the command through CUDAGENT_CONFINE (settings.py)."""
    import os
    import sys

    if value is None:
        return None
    if value not in CONFINE_LEVELS:
        raise typer.BadParameter(f"{value!r} is not a confinement level; use strict, best-effort or off")
    os.environ["CUDAGENT_CONFINE"] = value
    if value == "off":
        print(
            "warning: --confine off: candidate code runs with your user's files and network; evaluate only "
            "kernels you trust this way",
            file=sys.stderr,
        )
    return value


def confine_option():
    """--confine strict|best-effort|off for every command that runs candidate code."""
    return typer.Option(
        None,
        help="Confinement of the processes that run candidate code: strict (refuse to run unconfined), best-effort "
        "(default: what this kernel offers, said in each verdict) or off. Default: $CUDAGENT_CONFINE or best-effort.",
        metavar="strict|best-effort|off",
        callback=_confine,
    )


def evaluator_urls(value: str | None) -> list[str] | None:
    """--evaluator's URLs, each checked (a missing scheme is named at once)."""
    if not value:
        return None
    from cudagent.evaluator.remote import check_url

    return [check_url(u) for u in value.split(",") if u.strip()] or None


# A user's own model (cudagent/usermodel/loading.py): how `hotspots` and `optimize` are told what to build and call.
MODEL_OPTION_HELP = {
    "module": "Your model's class, when the file defines several (or use FILE:CLASS).",
    "inputs": "Your model's example inputs, e.g. 'x=bf16[8,1024,768], mask=bool[8,1024]'.",
    "init": "Constructor arguments: a Python list, or a dict of keywords.",
    "example": "A script that runs your model: its first call gives the inputs.",
    "hf": "A transformers model directory (a config alone: random weights).",
}


def model_option(name: str, panel: str | None = None):
    """--module, --inputs, --init, --example or --hf, worded alike wherever a user's model is given."""
    return typer.Option(None, help=MODEL_OPTION_HELP[name], rich_help_panel=panel, show_default=False)
