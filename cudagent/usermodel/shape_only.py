"""Operators of a model's graph computed from literals alone: an `arange` and what is made of it, such as the causal
mask a traced transformers model builds from its inputs' shapes. With shapes fixed by export their values are the
same on every call, so a region that reads them may compute them itself (regions.py folds them into attention).

    found = computed_from_shapes(nodes)       every such operator, in a graph's call_function nodes
    folded = read_from(members, found)        those a region reads, with everything they are made of
"""

from __future__ import annotations

# operators whose value is not set by their arguments: never folded as "computed from shapes alone"
UNSEEDED = set(
    "rand randn randint rand_like randn_like randint_like randperm bernoulli normal uniform multinomial dropout "
    "native_dropout empty empty_like empty_strided new_empty".split()
)


def computed_from_shapes(nodes: list) -> set:
    """The operators computed from literals alone (no input, weight or buffer reaches them): an `arange` and what is
    made of it. With shapes fixed by export, their values are the same on every call."""
    found = set()
    for node in nodes:
        if _name(node) in UNSEEDED:
            continue
        if all(value in found for value in node.all_input_nodes):
            found.add(node)
    return found


def read_from(members: list, shape_only: set) -> list:
    """The shape-only operators that `members` read, with everything they are made of."""
    inside = set(members)
    found, stack = set(), [v for n in members for v in n.all_input_nodes if v in shape_only and v not in inside]
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        stack.extend(node.all_input_nodes)
    return list(found)


def _name(node) -> str:
    """The operator's name (`arange`, `rand`), as regions.op_name reads it."""
    packet = getattr(node.target, "_overloadpacket", None)
    return packet.__name__ if packet is not None else str(getattr(node.target, "__name__", node.target)).split(".")[0]
