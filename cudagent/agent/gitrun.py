"""The run's git history: one branch per run, one commit per turn that changed files.

When the task file lies inside a git repository with at least one commit, the run works in a worktree of that
repository on its own branch `cudagent/<run-id>`, with the workspace at `cudagent/<task>/`: the user's checked-out
branch, index and uncommitted files are never touched. Otherwise the run gets a repository of its own in the run
directory, with the workspace at its top and the git directory beside it (not inside the workspace). Either way the
checkout holds only a `.git` link file; a model-written command that deletes or rewrites it is undone at the next
git operation, and the history it pointed to is out of the workspace's reach. Commits are made with cudagent's
identity, without hooks or signing, and carry machine-readable trailers (Cudagent-Turn, Cudagent-Tier, ...). A
lightweight tag `cudagent/<run-id>/best` points at the best verified commit.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import git

AUTHOR = ("cudagent", "cudagent@localhost")
WORKSPACE_IGNORE = "build/\n__pycache__/\n*.so\n*.o\n.*.cudagent-tmp\n"


@dataclass
class RunRepo:
    mode: str  # "worktree" or "own"
    repo_dir: str  # the checkout the run commits in
    workspace: str  # the workspace directory, inside repo_dir
    branch: str
    user_repo: str | None = None  # the user's repository, in worktree mode
    base_commit: str | None = None  # the commit the branch started from (after the setup commit)
    git_link: str | None = None  # the contents of the checkout's .git file, restored when damaged

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunRepo:
        return cls(**d)

    # ----- creation ---------------------------------------------------------------------------------------------

    @classmethod
    def create(cls, task_path: Path, run_dir: Path, run_id: str, task_stem: str) -> RunRepo:
        branch = f"cudagent/{run_id}"
        user = _user_repo(task_path)
        if user is not None:
            worktree = run_dir / "worktree"
            user.git.worktree("add", "-b", branch, str(worktree), "HEAD")
            return cls(
                "worktree",
                str(worktree),
                str(worktree / "cudagent" / task_stem),
                branch,
                user_repo=str(Path(user.working_tree_dir).resolve()),
                git_link=(worktree / ".git").read_text(),
            )
        own = run_dir / "repo"
        own.mkdir(parents=True, exist_ok=True)
        git.Git(str(own)).init("--quiet", f"--initial-branch={branch}", f"--separate-git-dir={run_dir / 'git'}")
        repo = git.Repo(own)
        with repo.config_writer() as cw:  # a repo of our own: settle what the user's global config might change
            cw.set_value("commit", "gpgsign", "false")
            cw.set_value("core", "autocrlf", "false")
        return cls("own", str(own), str(own), branch, git_link=(own / ".git").read_text())

    @property
    def repo(self) -> git.Repo:
        self.repair_link()
        return git.Repo(self.repo_dir)

    @property
    def link_path(self) -> Path:
        return Path(self.repo_dir) / ".git"

    def repair_link(self) -> bool:
        """Restore the checkout's .git link file if something removed or changed it; True when it did."""
        if self.git_link is None:
            return False
        link = self.link_path
        try:
            if link.is_file() and not link.is_symlink() and link.read_text() == self.git_link:
                return False
        except OSError:
            pass
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        elif link.exists() or link.is_symlink():
            link.unlink()
        link.write_text(self.git_link)
        return True

    # ----- removal ----------------------------------------------------------------------------------------------

    def remove(self, keep_branch: bool = False) -> list[str]:
        """Remove the run's checkout (the worktree in the user's repository) and, unless `keep_branch`, its branch
        and best tag. Only the names this run created (`cudagent/<run-id>`...) are ever touched. What was done."""
        done = []
        if self.mode != "worktree" or not self.user_repo or not Path(self.user_repo).is_dir():
            return done
        user = git.Repo(self.user_repo)
        if Path(self.repo_dir).exists():
            user.git.worktree("remove", "--force", self.repo_dir)
            done.append(f"removed the worktree {self.repo_dir}")
        user.git.worktree("prune")
        if not keep_branch and self.branch.startswith("cudagent/"):
            if self.branch in [h.name for h in user.heads]:
                user.git.branch("-D", self.branch)
                done.append(f"deleted the branch {self.branch}")
            tag = f"{self.branch}/best"
            if tag in [t.name for t in user.tags]:
                user.git.tag("-d", tag)
                done.append(f"deleted the tag {tag}")
        return done

    # ----- commits ----------------------------------------------------------------------------------------------

    def ensure_ignore_file(self) -> None:
        path = Path(self.workspace) / ".gitignore"
        if not path.exists():
            path.write_text(WORKSPACE_IGNORE)

    def changed(self) -> bool:
        out = self.repo.git.status("--porcelain", "--untracked-files=all", "--", self._ws_rel())
        return bool(out.strip())

    def commit(
        self, subject: str, body: str = "", trailers: dict | None = None, allow_empty: bool = False
    ) -> str | None:
        """Commit the workspace's changes; return the new commit, or None when there was nothing to commit."""
        repo = self.repo
        repo.git.add("-A", "--", self._ws_rel())
        staged = repo.git.diff("--cached", "--name-only", "--", self._ws_rel()).strip()
        if not staged and not allow_empty:
            return None
        message = subject.strip()
        if body.strip():
            message += "\n\n" + body.strip()
        if trailers:
            message += "\n\n" + "\n".join(f"{k}: {_one_line(v)}" for k, v in trailers.items() if v is not None)
        args = [
            "git",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
            "commit",
            "--no-verify",
            "--quiet",
            "-F",
            "-",
        ]
        if allow_empty:
            args.append("--allow-empty")
        repo.git.execute(args, istream=_Stdin(message), env=_identity_env())
        return repo.head.commit.hexsha

    def head(self) -> str:
        return self.repo.head.commit.hexsha

    def reset_to(self, sha: str) -> None:
        """Make the branch and the workspace exactly `sha` (untracked files go too, ignored build files stay)."""
        self.clear_stale_locks()
        repo = self.repo
        repo.git.reset("--hard", "--quiet", sha)
        repo.git.clean("-fdq", "--", self._ws_rel())

    def clear_stale_locks(self) -> list[str]:
        """Remove the lock files a killed commit of ours left behind (only those of this run's checkout, branch and
        tag; the caller holds the run's lock, so no git process of this run is alive)."""
        repo = self.repo
        own = Path(repo.git_dir)
        common = Path(repo.common_dir)
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
        self.repo.git.tag("-f", tag, sha)
        return tag

    def show(self, sha: str) -> str:
        """The commit's message and patch, as `git show` prints it."""
        return self.repo.git.show("--stat", "--patch", "--format=commit %H%n%n%B", sha)

    def files_at(self, sha: str) -> dict[str, bytes]:
        """The workspace's files in commit `sha`, by path relative to the workspace."""
        commit = self.repo.commit(sha)
        rel = self._ws_rel()
        tree = commit.tree if rel == "." else commit.tree / rel
        out = {}
        for item in tree.traverse():
            if item.type == "blob":
                out[str(Path(item.path).relative_to(rel)) if rel != "." else item.path] = item.data_stream.read()
        return out

    def _ws_rel(self) -> str:
        rel = os.path.relpath(self.workspace, self.repo_dir)
        return rel


class _Stdin:
    """A message for `git commit -F -` (gitpython's execute takes a file object as istream)."""

    def __init__(self, text: str):
        import tempfile

        self._f = tempfile.TemporaryFile()
        self._f.write(text.encode())
        self._f.seek(0)

    def fileno(self):
        return self._f.fileno()

    def read(self, *a):
        return self._f.read(*a)


def _identity_env() -> dict[str, str]:
    name, email = AUTHOR
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }


def _one_line(value) -> str:
    return " ".join(str(value).split())


def _user_repo(task_path: Path) -> git.Repo | None:
    """The user's repository holding the task file, when it has a commit to branch from."""
    try:
        repo = git.Repo(task_path.resolve().parent, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    if repo.bare or repo.working_tree_dir is None:
        return None
    try:
        _ = repo.head.commit
    except ValueError:  # no commit yet
        return None
    return repo
