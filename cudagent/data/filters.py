"""The filters a task must pass to enter a dataset, each a small function that returns None (kept) or the reason it
drops the task. Static ones read the source; the others run the task, in a worker process of their own
(check_worker.py), so a task that hangs, crashes or eats memory costs itself only.

    static       parses; no stochastic op in forward (rand*, dropout, bernoulli, ...)
    runs         loads, runs and is deterministic across two runs with one seed (the evaluator's task validation)
    compile      torch.compile's output agrees with eager's within the evaluator's tolerance
    degenerate   none of the bench's null candidates (zeros, the mean, passthrough, a subsample) passes
    runtime      the reference's median eager time is inside the window (ms)
    similarity   the normalized-AST similarity to every reference task is below the threshold; no duplicate inside
                 the set (the first of equal files is kept)
"""

from __future__ import annotations

import ast

from cudagent.syntax import parse

FILTERS = ("static", "runs", "compile", "degenerate", "runtime", "similarity", "duplicate")

STOCHASTIC_CALLS = {
    "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "bernoulli", "multinomial",
    "normal", "normal_", "uniform_", "exponential_", "geometric_", "cauchy_", "log_normal_", "random_", "poisson",
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "rrelu",
    "gumbel_softmax",
}  # fmt: skip


def static_reason(source: str) -> str | None:
    """The task's source parses and its forward calls nothing stochastic."""
    try:
        tree = parse(source)
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return "no class Model"
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = [n for n in ("get_inputs", "get_init_inputs") if n not in names]
    if missing:
        return f"no {' or '.join(missing)}"
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        return "Model has no forward"
    for node in ast.walk(forward):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in STOCHASTIC_CALLS:
                return f"a stochastic op in forward: {name} (line {node.lineno})"
    for node in ast.walk(model):
        if isinstance(node, ast.Attribute) and node.attr in ("Dropout", "Dropout2d", "AlphaDropout", "RReLU"):
            return f"a stochastic module in Model: nn.{node.attr} (line {node.lineno})"
    return None


def runtime_reason(median_ms: float, window: tuple[float, float]) -> str | None:
    lo, hi = window
    if median_ms < lo:
        return f"runs {median_ms:.3g} ms, under the window's {lo:g} ms"
    if median_ms > hi:
        return f"runs {median_ms:.3g} ms, over the window's {hi:g} ms"
    return None


def similarity_reason(closest: str | None, score: float, threshold: float) -> str | None:
    if closest is not None and score >= threshold:
        return f"AST similarity {score:.2f} to {closest} (threshold {threshold:g})"
    return None
