"""The modules a graph's operators ran in, as a person reads them (`blocks.0.{fc1, act}`): how regions and their
tasks are named."""

from __future__ import annotations


def module_path(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path.removeprefix("L['self'].").replace("L['self']", "")


def readable(paths: list[str]) -> str:
    """The modules a region's operators ran in, as a person reads them: `blocks.0.{fc1, act}`."""
    prefix = common_prefix(paths) if len(paths) > 1 else ""
    if not prefix or " + " in prefix:
        return " + ".join(paths[:3]) + (" ..." if len(paths) > 3 else "")
    rest = [p[len(prefix) :].lstrip(".") for p in paths if p != prefix]
    return prefix + (".{" + ", ".join(rest) + "}" if rest else "")


def common_prefix(paths: list[str]) -> str:
    if not paths:
        return ""
    parts = [p.split(".") for p in paths]
    out = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        out.append(level[0])
    common = ".".join(out)
    return common if common else " + ".join(paths[:3]) + (" ..." if len(paths) > 3 else "")
