"""The run's git history: one branch per run, one commit per turn that changed files.

When the task file lies inside a git repository with at least one commit, the run works in a worktree of that
repository on its own branch `cudagent/<run-id>`, with the workspace at `cudagent/<task>/`: the user's checked-out
branch, index and uncommitted files are never touched. Otherwise the run gets a repository of its own in the run
directory, with the workspace at its top and the git directory beside it (not inside the workspace). Either way the
checkout holds only a `.git` link file, restored when a command deletes or rewrites it; cudagent's own git never
reads it: the git directory was recorded when the run was made.

A commit holds the files cudagent chose (boundary/git.py): every regular file of the workspace, walked without
following a link, less build products and any nested `.git`; their objects are written by cudagent, so no
filter, hook or fsmonitor of any repository runs. Commits carry cudagent's identity and machine-readable trailers
(Cudagent-Turn, Cudagent-Tier, ...). A lightweight tag `cudagent/<run-id>/best` points at the best verified commit.
"""

from __future__ import annotations

import re
import shutil
import stat
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from cudagent.boundary import git
from cudagent.boundary.git import GitError, Repository
from cudagent.boundary.paths import Beneath

AUTHOR = ("cudagent", "cudagent@localhost")
WORKSPACE_IGNORE = "build/\n__pycache__/\n*.so\n*.o\n.*.cudagent-tmp\n"
# What a commit leaves out (the same as WORKSPACE_IGNORE, which only the user's own git reads): build products,
# and every `.git`, whose contents would be another repository's.
SKIPPED_FOLDERS = {"build", "__pycache__", ".git"}
SKIPPED_SUFFIXES = (".so", ".o", ".cudagent-tmp")
MAX_FILE_BYTES = 32 << 20  # larger files stay out of the history (a model that wrote a data dump)
_SHA = re.compile(r"[0-9a-f]{7,64}")


def skipped(rel: PurePosixPath, is_dir: bool) -> bool:
    if is_dir:
        return rel.name in SKIPPED_FOLDERS
    return rel.name == ".git" or rel.name.endswith(SKIPPED_SUFFIXES)


@dataclass
class RunRepo:
    mode: str  # "worktree" or "own"
    repo_dir: str  # the checkout the run commits in
    workspace: str  # the workspace directory, inside repo_dir
    branch: str
    user_repo: str | None = None  # the user's repository, in worktree mode
    base_commit: str | None = None  # the commit the branch started from (after the setup commit)
    git_link: str | None = None  # the contents of the checkout's .git file: "gitdir: <the git directory>"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunRepo:
        return cls(**d)

    # ----- creation ---------------------------------------------------------------------------------------------

    @classmethod
    def create(cls, task_path: Path, run_dir: Path, run_id: str, task_stem: str) -> RunRepo:
        branch = f"cudagent/{run_id}"
        user = git.toplevel(task_path.resolve().parent)
        if user is not None:
            worktree = run_dir / "worktree"
            git.run(["worktree", "add", "--quiet", "-b", branch, str(worktree), "HEAD"], cwd=str(user))
            return cls(
                "worktree",
                str(worktree),
                str(worktree / "cudagent" / task_stem),
                branch,
                user_repo=str(user),
                git_link=(worktree / ".git").read_text(),
            )
        own = run_dir / "repo"
        own.mkdir(parents=True, exist_ok=True)
        args = ["init", "--quiet", "--template=", f"--initial-branch={branch}", f"--separate-git-dir={run_dir / 'git'}"]
        git.run([*args, str(own)], cwd=str(run_dir))
        return cls("own", str(own), str(own), branch, git_link=(own / ".git").read_text())

    @property
    def repository(self) -> Repository:
        """The run's git directory, as recorded when the run was made."""
        self.repair_link()
        return Repository(self.git_dir)

    @property
    def git_dir(self) -> str:
        if not self.git_link or not self.git_link.startswith("gitdir:"):
            raise GitError(f"the run's record names no git directory for {self.repo_dir}")
        path = Path(self.git_link.split(":", 1)[1].strip())
        return str(path if path.is_absolute() else (Path(self.repo_dir) / path).resolve())

    @property
    def link_path(self) -> Path:
        return Path(self.repo_dir) / ".git"

    def repair_link(self) -> bool:
        """Restore the checkout's .git link file if something removed or changed it; True when it did. (Only the
        user's own git reads it; cudagent's never does.)"""
        if self.git_link is None or not Path(self.repo_dir).is_dir():
            return False
        checkout = Beneath(Path(self.repo_dir))
        name = PurePosixPath(".git")
        try:
            if checkout.kind(name) == "file" and checkout.read_bytes(name).decode() == self.git_link:
                return False
        except (OSError, UnicodeDecodeError):
            pass
        checkout.remove(name)
        checkout.write_bytes(name, self.git_link.encode())
        return True

    # ----- removal ----------------------------------------------------------------------------------------------

    def remove(self, keep_branch: bool = False) -> list[str]:
        """Remove the run's checkout (the worktree in the user's repository) and, unless `keep_branch`, its branch
        and best tag. Only the names this run created (`cudagent/<run-id>`...) are ever touched. What was done."""
        done = []
        if self.mode != "worktree" or not self.user_repo or not Path(self.user_repo).is_dir():
            return done
        if Path(self.repo_dir).exists():  # removed here (no link followed), not by git, which would list it first
            shutil.rmtree(self.repo_dir)
            done.append(f"removed the worktree {self.repo_dir}")
        user = Repository(git.run(["rev-parse", "--absolute-git-dir"], cwd=self.user_repo).decode().strip())
        git.run(["worktree", "prune"], cwd=self.user_repo)
        if not keep_branch and self.branch.startswith("cudagent/"):
            if user.delete_ref(f"refs/heads/{self.branch}"):
                done.append(f"deleted the branch {self.branch}")
            if user.delete_ref(f"refs/tags/{self.branch}/best"):
                done.append(f"deleted the tag {self.branch}/best")
        return done

    # ----- commits ----------------------------------------------------------------------------------------------

    def ensure_ignore_file(self) -> None:
        """A .gitignore for the user's own git in the checkout (cudagent's commits choose their files themselves)."""
        tree = Beneath(Path(self.workspace))
        if tree.kind(PurePosixPath(".gitignore")) is None:
            tree.write_bytes(PurePosixPath(".gitignore"), WORKSPACE_IGNORE.encode())

    def commit(
        self, subject: str, body: str = "", trailers: dict | None = None, allow_empty: bool = False
    ) -> str | None:
        """Commit the workspace's files; return the new commit, or None when nothing changed. GitError when the
        repository cannot take it."""
        repo = self.repository
        head = repo.resolve("HEAD")
        tree = self._tree_with_workspace(repo, head)
        if head and not allow_empty and tree == repo.text("rev-parse", f"{head}^{{tree}}"):
            return None
        message = subject.strip()
        if body.strip():
            message += "\n\n" + body.strip()
        if trailers:
            message += "\n\n" + "\n".join(f"{k}: {_one_line(v)}" for k, v in trailers.items() if v is not None)
        sha = repo.commit_tree(tree, head, message, AUTHOR)
        repo.update_ref(f"refs/heads/{self.branch}", sha, head or git.ZERO, message=f"cudagent: {subject}"[:200])
        repo.set_index(sha)
        return sha

    def _tree_with_workspace(self, repo: Repository, head: str | None) -> str:
        """The tree of HEAD with the workspace's folder replaced by what the workspace holds now."""
        files = {}
        tree = Beneath(Path(self.workspace))
        for rel, mode in tree.files(skip=skipped):
            try:
                data = tree.read_bytes(rel, limit=MAX_FILE_BYTES)
            except (OSError, ValueError):  # too large, or gone or replaced by a link since it was listed
                continue
            files[rel.parts] = ("100755" if mode & stat.S_IXUSR else "100644", repo.store("blob", data))
        workspace_tree = _write_nested(repo, files)
        rel = PurePosixPath(Path(self.workspace).relative_to(self.repo_dir).as_posix())
        if rel == PurePosixPath("."):
            return workspace_tree
        return _replace_in_tree(repo, repo.text("rev-parse", f"{head}^{{tree}}") if head else None, rel.parts,
                                workspace_tree)  # fmt: skip

    def head(self) -> str:
        sha = self.repository.resolve("HEAD")
        if sha is None:
            raise GitError(f"the run's branch {self.branch} has no commit")
        return sha

    def reset_to(self, sha: str) -> None:
        """Make the branch and the workspace exactly `sha`: its files written back, files it does not hold removed
        (build products stay), without git reading the workspace."""
        self.clear_stale_locks()
        repo = self.repository
        sha = self._commit(sha)
        wanted = repo.blobs_below(sha, self._ws_rel())
        tree = Beneath(Path(self.workspace))
        for rel, _mode in tree.files(skip=skipped):
            if str(rel) not in wanted:
                tree.remove(rel)
        tree.remove_empty_folders(keep=("kernels",), skip=skipped)
        for rel, (mode, data) in wanted.items():
            path = PurePosixPath(rel)
            if tree.kind(path) == "file" and tree.read_bytes(path) == data:
                continue
            if tree.kind(path) not in (None, "file"):
                tree.remove(path)
            tree.write_bytes(path, data, 0o755 if mode == "100755" else 0o644)
        repo.update_ref(f"refs/heads/{self.branch}", sha, message="cudagent: reset")
        repo.set_index(sha)

    def clear_stale_locks(self) -> list[str]:
        """Remove the lock files a killed commit of ours left behind (only those of this run's checkout, branch and
        tag; the caller holds the run's lock, so no git process of this run is alive)."""
        own = Path(self.git_dir)
        common = Repository(self.git_dir).common_dir
        candidates = [
            own / "index.lock",
            own / "HEAD.lock",
            common / "refs" / "heads" / f"{self.branch}.lock",
            common / "refs" / "tags" / f"{self.branch}" / "best.lock",
        ]
        removed = []
        for lock in candidates:
            if lock.is_file():
                lock.unlink()
                removed.append(str(lock))
        return removed

    def set_best(self, sha: str) -> str:
        tag = f"{self.branch}/best"
        self.repository.update_ref(f"refs/tags/{tag}", self._commit(sha), message="cudagent: best")
        return tag

    def show(self, sha: str) -> str:
        """The commit's message and patch, as `git show` prints it (no external diff or text conversion)."""
        fmt = "--format=commit %H%n%n%B"
        out = self.repository.git("show", "--stat", "--patch", "--no-ext-diff", "--no-textconv", "--no-color", fmt,
                                  self._commit(sha))  # fmt: skip
        return out.decode(errors="replace")

    def files_at(self, sha: str) -> dict[str, bytes]:
        """The workspace's files in commit `sha`, by path relative to the workspace."""
        blobs = self.repository.blobs_below(self._commit(sha), self._ws_rel())
        return {rel: data for rel, (_mode, data) in blobs.items()}

    def _commit(self, rev: str) -> str:
        """`rev` as a full commit id of this repository; GitError for anything else (an option, a wrong name)."""
        sha = self.repository.resolve(rev) if isinstance(rev, str) and _SHA.fullmatch(rev) else None
        if sha is None:
            raise GitError(f"{rev!r} is not a commit of the run's branch; give a commit id from `cudagent log`")
        return sha

    def _ws_rel(self) -> str:
        return Path(self.workspace).relative_to(self.repo_dir).as_posix()


def _write_nested(repo: Repository, files: dict[tuple[str, ...], tuple[str, str]]) -> str:
    """Trees for `files` ({path parts: (mode, blob)}), the top one's id."""
    entries: dict[str, tuple[str, str]] = {}
    folders: dict[str, dict] = {}
    for parts, entry in files.items():
        if len(parts) == 1:
            entries[parts[0]] = entry
        else:
            folders.setdefault(parts[0], {})[parts[1:]] = entry
    for name, below in folders.items():
        entries[name] = ("40000", _write_nested(repo, below))
    return repo.write_tree(entries)


def _replace_in_tree(repo: Repository, tree: str | None, parts: tuple[str, ...], new: str) -> str:
    """`tree` with the folder at `parts` replaced by the tree `new` (folders on the way made as needed)."""
    entries = repo.tree_entries(tree) if tree else {}
    if len(parts) == 1:
        entries[parts[0]] = ("40000", new)
    else:
        below = entries.get(parts[0])
        entries[parts[0]] = ("40000", _replace_in_tree(repo, below[1] if below and below[0] == "40000" else None,
                                                       parts[1:], new))  # fmt: skip
    return repo.write_tree(entries)


def _one_line(value) -> str:
    return " ".join(str(value).split())
