"""Which tasks a bench runs, and where each one's solution is."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

from cudagent.errors import CudagentError

_LEVEL = re.compile(r"^level_?(\d+)$", re.IGNORECASE)


@dataclass(frozen=True)
class BenchTask:
    name: str  # the file's stem, e.g. 19_ReLU
    level: str  # "1", "2", ... for KernelBench's level folders, "-" for a plain folder
    path: Path

    @property
    def key(self) -> str:
        return f"{self.level}/{self.name}"


def discover(
    root: Path, levels: list[str] | None = None, select: str | None = None, list_file: Path | None = None
) -> list[BenchTask]:
    """The task files under `root`: its level*/ folders (KernelBench, also under KernelBench/) or the .py files
    directly in it. `levels`, a name glob and a list file (one name or level/name per line) narrow the choice."""
    root = root.expanduser()
    if not root.is_dir():
        raise CudagentError(f"{root} is not a directory; give a folder of task files or a KernelBench checkout")
    base = root / "KernelBench" if (root / "KernelBench").is_dir() and not _level_dirs(root) else root
    tasks: list[BenchTask] = []
    level_dirs = _level_dirs(base)
    if level_dirs:
        for level, folder in level_dirs:
            tasks += [BenchTask(p.stem, level, p) for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]
    else:
        tasks = [BenchTask(p.stem, "-", p) for p in sorted(base.glob("*.py")) if not p.name.startswith("_")]
    if levels:
        unknown = set(levels) - {t.level for t in tasks}
        if unknown:
            raise CudagentError(
                f"no level {', '.join(sorted(unknown))} under {base}; "
                f"levels there: {', '.join(sorted({t.level for t in tasks})) or 'none'}"
            )
        tasks = [t for t in tasks if t.level in levels]
    if select:
        tasks = [t for t in tasks if fnmatch.fnmatch(t.name, select) or fnmatch.fnmatch(t.key, select)]
    if list_file is not None:
        try:
            wanted = {
                ln.strip().removesuffix(".py")
                for ln in list_file.read_text().splitlines()
                if ln.strip() and not ln.startswith("#")
            }
        except OSError as exc:
            raise CudagentError(f"cannot read the list file {list_file}: {exc.strerror}") from None
        tasks = [t for t in tasks if t.name in wanted or t.key in wanted]
    if not tasks:
        raise CudagentError(f"no task files selected under {base}; check the folder, --level, --select and --list")
    return tasks


def _level_dirs(root: Path) -> list[tuple[str, Path]]:
    found = []
    for p in sorted(root.iterdir()) if root.is_dir() else []:
        m = _LEVEL.match(p.name)
        if p.is_dir() and m:
            found.append((m.group(1), p))
    return sorted(found, key=lambda x: int(x[0]))


def solution_for(task: BenchTask, solutions: Path) -> Path | None:
    """DIR/<level>/<stem>/ or DIR/<stem>/ (a workspace), or DIR/.../<stem>.py (one model_new.py), if present."""
    for base in (solutions / f"level{task.level}", solutions):
        for candidate in (base / task.name, base / f"{task.name}.py"):
            if candidate.is_dir() and (candidate / "model_new.py").is_file():
                return candidate
            if candidate.is_file():
                return candidate
    return None
