"""Normalized-AST similarity between task files: decontamination against a reference set (KernelBench) and exact
duplicates inside a set.

A file's fingerprint is the set of 4-grams of its normalized AST: node types in order, with the names that carry
meaning kept (attributes and called functions: `relu`, `conv2d`, `softmax`) and what does not replaced (local
names, numbers, strings, docstrings), so renaming variables or changing sizes does not hide a copy. Similarity is
the Jaccard index of two fingerprints; a file whose similarity to any reference reaches the threshold (0.9, the
paper's) is contaminated. Two files with the same normalized stream are duplicates.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass

from cudagent.syntax import parse

NGRAM = 4


def normalized_tokens(source: str) -> list[str]:
    tree = parse(source)
    tokens: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant):
            if isinstance(node.value.value, str):
                continue  # docstrings
        kind = type(node).__name__
        if isinstance(node, ast.Attribute):
            tokens.append(f"attr:{node.attr}")
        elif isinstance(node, ast.Constant):
            tokens.append(f"const:{type(node.value).__name__}")
        elif isinstance(node, ast.Name):
            tokens.append("name")
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            tokens.append(f"{kind}:{node.name if node.name in ('forward', '__init__', 'Model') else '_'}")
        elif not isinstance(node, (ast.Load, ast.Store, ast.Del, ast.expr_context)):
            tokens.append(kind)
    return tokens


@dataclass(frozen=True)
class Fingerprint:
    grams: frozenset[int]
    digest: str  # of the whole normalized stream: equal digests are duplicates


def fingerprint(source: str) -> Fingerprint:
    tokens = normalized_tokens(source)
    grams = frozenset(hash("\x1f".join(tokens[i : i + NGRAM])) for i in range(max(1, len(tokens) - NGRAM + 1)))
    return Fingerprint(grams, hashlib.sha256("\x1f".join(tokens).encode()).hexdigest())


def similarity(a: Fingerprint, b: Fingerprint) -> float:
    if not a.grams or not b.grams:
        return 0.0
    shared = len(a.grams & b.grams)
    return shared / (len(a.grams) + len(b.grams) - shared)


def most_similar(candidate: Fingerprint, references: dict[str, Fingerprint]) -> tuple[str | None, float]:
    """The reference closest to `candidate` and the similarity; a size bound skips pairs that cannot reach it."""
    best_name, best = None, 0.0
    n = len(candidate.grams)
    for name, ref in references.items():
        m = len(ref.grams)
        if min(n, m) / max(n, m, 1) <= best:  # Jaccard can be at most min/max of the two sizes
            continue
        s = similarity(candidate, ref)
        if s > best:
            best_name, best = name, s
    return best_name, best
