"""Every git command cudagent runs, and the objects it writes itself, in one place.

Git runs programs that repository content names: `core.fsmonitor`, hooks, filter and diff drivers, submodule
`update = !cmd`, and a nested repository's own configuration when git walks into it. None of that may reach the
run's git, since the workspace is the model's. So:

- Git never looks at the workspace. Every command names its repository (`--git-dir`, recorded when the run was
  made, never read back from the workspace) and runs in it; no command here has a work tree, so git never lists,
  stats or filters a workspace file and never finds a nested `.git` there.
- The files a commit records are the ones cudagent chose: `RunRepo` walks the workspace itself (boundary/paths.py,
  no link followed, nested `.git` folders skipped), and their bytes become objects written here (`store`), as git
  writes loose objects, with no filter, attribute or hook in between. Trees and commits are written the same way;
  only ref updates, the index and reading go through git, with plumbing commands.
- Each command runs with configuration that switches off whatever could run a program (fsmonitor, hooks, signing,
  pagers, external diff and textconv, submodule recursion, protocols), and an environment without the caller's
  GIT_* variables.
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import subprocess
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

HARDENED = [
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.untrackedCache=false",
    "-c", "core.pager=cat",
    "-c", "core.attributesFile=/dev/null",
    "-c", "commit.gpgSign=false",
    "-c", "tag.gpgSign=false",
    "-c", "submodule.recurse=false",
    "-c", "protocol.allow=never",
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
]  # fmt: skip
TIMEOUT_S = 120
ZERO = "0" * 40


class GitError(Exception):
    """A git command failed, or the repository is not what it was; the message is one sentence."""


def git_env(extra: dict | None = None) -> dict[str, str]:
    """The caller's environment without GIT_* variables (a GIT_DIR or GIT_INDEX_FILE of the user's shell must not
    steer the run's git), with nothing interactive."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_NO_REPLACE_OBJECTS": "1"})
    env.update({"LC_ALL": "C", "LANGUAGE": "C", "GIT_ATTR_NOSYSTEM": "1"})
    env.update(extra or {})
    return env


def run(args: list[str], cwd: str, input: bytes | None = None, env: dict | None = None) -> bytes:
    """`git ARGS` hardened, in `cwd`; its standard output, or GitError naming what failed."""
    try:
        done = subprocess.run(
            ["git", *HARDENED, *args],
            cwd=cwd,
            input=input,
            capture_output=True,
            env=git_env(env),
            timeout=TIMEOUT_S,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise GitError("git is not installed; install it (Debian/Ubuntu: apt install git)") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} did not finish within {TIMEOUT_S} s") from None
    except OSError as exc:
        raise GitError(f"git {args[0]} could not run: {exc}") from None
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        why = next((ln for ln in lines if ln.startswith(("fatal:", "error:"))), lines[0] if lines else "")
        raise GitError(f"git {args[0]} failed: {why or f'exit status {done.returncode}'}")
    return done.stdout


def toplevel(directory: Path) -> Path | None:
    """The work tree of the user's repository holding `directory`, when it has a commit to branch from."""
    try:
        top = run(["rev-parse", "--show-toplevel"], cwd=str(directory)).decode().strip()
        run(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=top)
    except GitError:
        return None
    return Path(top).resolve() if top else None


@dataclass(frozen=True)
class Repository:
    """One repository, addressed by its git directory (a worktree's own one, in a worktree)."""

    git_dir: str

    def git(self, *args: str, input: bytes | None = None, index: str | None = None) -> bytes:
        env = {"GIT_INDEX_FILE": index} if index else None
        return run([f"--git-dir={self.git_dir}", *args], cwd=self.git_dir, input=input, env=env)

    def text(self, *args: str) -> str:
        return self.git(*args).decode(errors="replace").strip()

    def resolve(self, rev: str) -> str | None:
        try:
            return self.text("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}") or None
        except GitError:
            return None

    @functools.cached_property
    def common_dir(self) -> Path:
        return (Path(self.git_dir) / self.text("rev-parse", "--git-common-dir")).resolve()

    # ----- objects ----------------------------------------------------------------------------------------------

    def store(self, kind: str, data: bytes) -> str:
        """Write one object (blob, tree or commit) as git writes a loose object; its id."""
        fmt = self._format
        raw = f"{kind} {len(data)}\0".encode() + data
        oid = hashlib.new(fmt, raw).hexdigest()
        folder = self._objects() / oid[:2]
        target = folder / oid[2:]
        if target.exists():
            return oid
        folder.mkdir(exist_ok=True)
        tmp = folder / f"tmp_obj_{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        with os.fdopen(fd, "wb") as f:
            f.write(zlib.compress(raw))
        os.replace(tmp, target)
        return oid

    def write_tree(self, entries: dict[str, tuple[str, str]]) -> str:
        """A tree of `entries` ({name: (mode, object id)}, modes as git writes them: 100644, 100755, 40000)."""

        def order(name: str) -> bytes:  # git sorts a folder as if its name ended in "/"
            return name.encode("utf-8", "surrogateescape") + (b"/" if entries[name][0] == "40000" else b"")

        body = b"".join(
            f"{entries[n][0]} ".encode() + n.encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(entries[n][1])
            for n in sorted(entries, key=order)
        )
        return self.store("tree", body)

    def tree_entries(self, tree: str) -> dict[str, tuple[str, str]]:
        """The entries of one tree: {name: (mode, object id)}."""
        out = self.git("ls-tree", "-z", "--full-tree", tree)
        entries = {}
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, name = record.split(b"\t", 1)
            mode, _kind, oid = meta.decode().split()
            entries[name.decode("utf-8", "surrogateescape")] = (mode, oid)
        return entries

    def blobs_below(self, commit: str, path: str) -> dict[str, tuple[str, bytes]]:
        """Every file below `path` ("." for all) in `commit`: {path relative to `path`: (mode, bytes)}."""
        args = ["ls-tree", "-r", "-z", "--full-tree", commit] + ([] if path == "." else ["--", path])
        listed = []
        for record in self.git(*args).split(b"\0"):
            if not record:
                continue
            meta, name = record.split(b"\t", 1)
            mode, kind, oid = meta.decode().split()
            if kind == "blob":
                rel = name.decode("utf-8", "surrogateescape")
                listed.append((rel if path == "." else os.path.relpath(rel, path), mode, oid))
        data = self._cat([oid for _, _, oid in listed])
        return {rel: (mode, data[oid]) for rel, mode, oid in listed}

    def _cat(self, oids: list[str]) -> dict[str, bytes]:
        if not oids:
            return {}
        out = self.git("cat-file", "--batch", input="".join(f"{o}\n" for o in oids).encode())
        found, i = {}, 0
        while i < len(out):
            end = out.index(b"\n", i)
            oid, _kind, size = out[i:end].decode().split()
            start = end + 1
            found[oid] = out[start : start + int(size)]
            i = start + int(size) + 1
        return found

    def commit_tree(self, tree: str, parent: str | None, message: str, identity: tuple[str, str]) -> str:
        name, email = identity
        stamp = f"{int(time.time())} +0000"
        lines = [f"tree {tree}"] + ([f"parent {parent}"] if parent else [])
        lines += [f"author {name} <{email}> {stamp}", f"committer {name} <{email}> {stamp}"]
        return self.store("commit", ("\n".join(lines) + "\n\n" + message.rstrip("\n") + "\n").encode())

    # ----- refs and the index -----------------------------------------------------------------------------------

    def update_ref(self, ref: str, new: str, old: str | None = None, message: str = "cudagent") -> None:
        self.git("update-ref", "-m", message, ref, new, *([old] if old else []))

    def delete_ref(self, ref: str) -> bool:
        try:
            self.git("show-ref", "--verify", "--quiet", ref)
        except GitError:
            return False
        self.git("update-ref", "-d", ref)
        return True

    def set_index(self, commit: str) -> None:
        """The index (what `git status` in the checkout compares with) made to hold `commit`'s tree."""
        self.git("read-tree", commit)

    def _objects(self) -> Path:
        return self.common_dir / "objects"

    @functools.cached_property
    def _format(self) -> str:
        try:
            fmt = self.text("rev-parse", "--show-object-format")
        except GitError:
            fmt = "sha1"
        return fmt if fmt in ("sha1", "sha256") else "sha1"
