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
    """verl pulls Ray and pins transformers: inside cudagent only cudagent/train/agent_loop.py (the adapter) and
    cudagent/train/verl_config.py (verl's own config check) may import it (the tests of the training stage may
    too), and importing the CLI or the rest of cudagent.train must not load it."""
    allowed = {ROOT / "train" / "agent_loop.py", ROOT / "train" / "verl_config.py"}
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


# The floors of the house, lowest first: a module imports only from its own room or from rooms on lower floors.
FLOORS = [
    {"cudagent", "errors", "settings", "resources", "procs", "reaper", "syntax", "resultlog", "png", "text", "trees"},
    {"device", "task", "workspace", "taskpool", "boundary"},
    {"evaluator"},
    {"agent", "serve"},
    {"bench"},
    {"data", "train", "usermodel"},
    {"cli", "__main__"},
]


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "cudagent"


def test_every_room_has_a_floor_and_imports_go_down():
    floor = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}
    edges = _imports()
    assert {_room(m) for m in edges} <= set(floor), "a room without a floor: add it to FLOORS"
    upward = [
        f"{m} -> {t}"
        for m, targets in edges.items()
        for t in targets
        if _room(t) != _room(m) and floor[_room(t)] > floor[_room(m)]
    ]
    assert upward == []


def _calls(paths, names: set[str]) -> list[str]:
    """`path:line name(...)` for every call of one of `names` (as a plain name or an attribute) in `paths`."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in names:
                    found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {name}(...)")
    return found


def _python_files(*folders: str) -> list[Path]:
    return [p for folder in folders for p in (ROOT.parent / folder).rglob("*.py")]


def test_episodes_are_opened_in_one_place():
    """optimize (new, resumed, token mode), bench, training rollouts and the tests all call open_episode."""
    opened = _calls(_python_files("cudagent", "tests", "benchmarks"), {"Episode"})
    assert [m.split(":")[0] for m in opened] == ["cudagent/agent/environment.py"], opened


def test_only_the_ports_construct_an_evaluator():
    """Inside cudagent, an evaluator (or a port, or a pool of them) is made only by the port's implementations and
    by where.py, which chooses between them; everything else asks where.evaluators()."""
    allowed = {"cudagent/evaluator/local.py", "cudagent/evaluator/remote.py", "cudagent/evaluator/where.py"}
    made = _calls(_python_files("cudagent"), {"Evaluator", "LocalEvaluator", "LocalEvaluators", "RemoteEvaluator",
                                               "EvaluatorPool"})  # fmt: skip
    assert [m for m in made if m.split(":")[0] not in allowed] == []
    assert {m.split(":")[0] for m in made} == allowed  # the rule looks at the right names


def test_command_modules_do_not_import_each_other():
    """A CLI command module imports the shared CLI modules (the app, options, progress, output), never another
    command's."""
    shared = {"cudagent.cli", "cudagent.cli.app", "cudagent.cli.options", "cudagent.cli.progress"}
    shared.add("cudagent.cli.output")
    edges = _imports()
    commands = {m for m in edges if m.startswith("cudagent.cli.") and m not in shared}
    assert len(commands) >= 8
    assert [f"{m} -> {t}" for m in sorted(commands) for t in sorted(edges[m]) if t in commands] == []


# Directory names the usual Python .gitignore templates and code-structure tools treat as generated output: a package
# directory so named is lost by a fork that adopts such a template, and skipped by those tools.
OUTPUT_LIKE = {"build", "dist", "downloads", "eggs", "lib", "lib64", "parts", "sdist", "var", "wheels", "env", "venv"}
OUTPUT_LIKE |= {"htmlcov", "site", "out", "target", "bin", "obj", "__pypackages__"}


def test_no_package_directory_is_named_like_build_output():
    named = sorted(str(p.relative_to(ROOT.parent)) for p in ROOT.rglob("*") if p.is_dir() and p.name in OUTPUT_LIKE)
    assert not named, f"rename these: {named}"
    assert (ROOT / "evaluator" / "toolchain" / "extension.py").is_file()  # the compiler driver's room
