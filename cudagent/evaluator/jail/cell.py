"""Where one evaluator's candidate processes live: this machine's jail (level.py) and the hand-ins they may read.

    cell = Cell(decide(level, device), device)
    handin = cell.handin()            a fresh folder for one evaluation, written by the evaluator alone
    handin.put("model_new.py", text); handin.copy(library, "cuda_extension.so"); handin.seal()
    ... the candidate's process reads cell.inside(handin.path) ...
    handin.remove(); cell.close()

A hand-in holds what an evaluation gives its candidate: the model_new.py that was audited (a copy taken before the
audit, so the text judged is the text run) and the libraries the trusted build made and the link audit read. The
candidate's process sees the hand-ins read-only (bound at /cudagent/in inside the jail; Landlock grants them for
reading) and writes nothing but its own scratch, which nobody trusted ever reads: no folder is shared writable
between trusted code and a candidate, and no hand-in outlives its evaluation.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from cudagent.boundary.bwrap import View
from cudagent.evaluator.jail import keeper
from cudagent.evaluator.jail.confine import Plan
from cudagent.evaluator.jail.level import Jail

INSIDE = "/cudagent/in"  # where the hand-ins appear inside the jail


class HandIn:
    """A folder of files for one evaluation's candidate; see the module's note."""

    def __init__(self, path: Path, inside: str):
        self.path, self.inside = path, inside

    def put(self, name: str, data: str | bytes) -> Path:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        return target

    def copy(self, source: Path, name: str) -> Path:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target, follow_symlinks=False)
        return target

    def seal(self) -> None:
        """Read-only for everyone, folders and files: a defence of its own where Landlock is absent."""
        for root, _, files in os.walk(self.path):
            for name in files:
                os.chmod(os.path.join(root, name), 0o444)
            os.chmod(root, 0o555)

    def remove(self) -> None:
        _remove(self.path)

    def libraries(self) -> list[Path]:
        return sorted(p for p in self.path.rglob("*.so") if p.is_file() and not p.is_symlink())


class Cell:
    """The jail of one evaluator's candidates and the folder their hand-ins live in."""

    def __init__(self, jail: Jail, device: str, toolchain: tuple[str, ...] = ()):
        """toolchain: folders of the build's programs outside /usr (a compiler under /opt): the libraries they bring
        (its libstdc++) are what the candidate's library loads."""
        self.jail, self.device, self.toolchain = jail, device, tuple(toolchain)
        self.root = Path(tempfile.mkdtemp(prefix="cudagent-handins-"))
        os.chmod(self.root, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        self._count = 0

    def inside(self, path: str | Path) -> str:
        """`path` (under the hand-ins' folder) as a process in the cell sees it."""
        if not self.jail.jailed:
            return str(path)
        return os.path.join(INSIDE, os.path.relpath(path, self.root))

    def handin(self) -> HandIn:
        self._count += 1
        path = self.root / str(self._count)
        path.mkdir(mode=0o755)
        return HandIn(path, self.inside(path))

    def view(self) -> View | None:
        """The bubblewrap view of a candidate's process (the fork server's too); None where the jail has none."""
        if not self.jail.jailed:
            return None
        return View(
            read=list(self.toolchain),
            mounts={INSIDE: str(self.root)},
            devices=self.device == "cuda",
            keep_capabilities=True,
            chdir="/",
        )

    def plan(self) -> Plan:
        """The inner layer's grants: read the hand-ins (its scratch, its working directory, is always writable)."""
        return Plan(self.jail.inner, read=[self.inside(self.root), *self.toolchain], write=[])

    def scratch(self) -> str | None:
        """The scratch a candidate's process gets inside the jail (its own memory file system), or None when the
        caller must make one (no PID and mount namespace of its own)."""
        return keeper.SCRATCH if self.jail.tree == "namespace" else None

    def close(self) -> None:
        _remove(self.root)


def _remove(folder: Path) -> None:
    """A folder sealed read-only, removed (links inside are removed, never followed)."""
    for root, _, _ in os.walk(folder):
        os.chmod(root, 0o755)
    shutil.rmtree(folder, ignore_errors=True)
