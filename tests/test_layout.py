"""The package's layout: no module imports another that imports it back (lazy imports inside functions count),
and the core never imports the training engine."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "cudagent"


def _imports() -> dict[str, set[str]]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            edges[name] |= {t for t in targets if t in modules and t != name}
    return edges


def test_no_import_cycles():
    edges = _imports()
    seen: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(m: str, path: list[str]) -> None:
        seen[m] = 1
        for n in sorted(edges[m]):
            assert seen.get(n) != 1, "import cycle: " + " -> ".join(path[path.index(n) :] + [m, n])
            if n not in seen:
                visit(n, path + [n])
        seen[m] = 2

    for m in sorted(edges):
        if m not in seen:
            visit(m, [m])


def test_only_the_verl_adapter_imports_verl():
    """verl pulls Ray and pins transformers: inside cudagent only cudagent/train/agent_loop.py may import it (the
    tests of the training stage may too), and importing the CLI or the rest of cudagent.train must not load it."""
    allowed = {ROOT / "train" / "agent_loop.py"}
    assert all(p.is_file() for p in allowed)
    for path in [*ROOT.rglob("*.py"), *(ROOT.parent / "benchmarks").rglob("*.py")]:
        if path in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n.split(".")[0] == "verl" for n in names), path
    probe = "import sys, cudagent.cli, cudagent.train.command, cudagent.train.rft, cudagent.train.rollout; "
    probe += "print([m for m in sys.modules if m.split('.')[0] in ('verl', 'ray')])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT.parent)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
