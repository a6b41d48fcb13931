"""Paths a model named, opened beneath one folder and nowhere else.

    tree = Beneath(workspace)
    rel = tree.relative("kernels/k.cu")       # a checked relative path, or PathRefused with the reason
    tree.read_bytes(rel); tree.write_bytes(rel, data); tree.kind(rel); tree.remove(rel)
    for rel, mode in tree.files(skip=...): ...  # every regular file below, never through a link

Every component is opened from the folder above it (`dir_fd`) with O_NOFOLLOW: a symbolic link anywhere on the way
(a planted `kernels -> /etc`, a file replaced by a link) is refused, never followed, whatever was checked before.
Files are written to a temporary name created exclusively (O_EXCL, a random name) and renamed over the target, so
a link planted at any name beside it is never written through, and a link at the target itself is replaced, not
followed. Only regular files are read (a FIFO or a device is refused without blocking). The root itself is trusted:
cudagent made it.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from pathlib import Path, PurePosixPath

MAX_PATH_CHARS = 1024
MAX_NAME_BYTES = 255  # what Linux file systems take for one name
MAX_DEPTH = 32
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PathRefused(ValueError):
    """A model-named path that may not be used; the message says why, in words the model can act on."""


class Beneath:
    def __init__(self, root: Path):
        self.root = Path(root)

    # ----- names ------------------------------------------------------------------------------------------------

    def relative(self, path: str) -> PurePosixPath:
        """`path` (relative to the root, or absolute inside it) as a clean relative path; PathRefused otherwise."""
        if not isinstance(path, str) or not path.strip():
            raise PathRefused("give a path relative to the workspace, e.g. kernels/my_kernel.cu")
        if "\0" in path:
            raise PathRefused("the path holds a NUL character; give a plain relative path")
        if len(path) > MAX_PATH_CHARS:
            raise PathRefused(f"the path is {len(path)} characters long; at most {MAX_PATH_CHARS} are accepted")
        given = PurePosixPath(path)
        if given.is_absolute():
            root = PurePosixPath(os.path.abspath(self.root))
            if given != root and root not in given.parents:
                raise PathRefused(f"{path} is outside the workspace; paths are relative to {self.root}")
            given = given.relative_to(root)
        parts = [p for p in given.parts if p not in ("", ".")]
        if ".." in parts:
            raise PathRefused(f"{path} leaves its folder (..); give the path from the workspace down")
        if len(parts) > MAX_DEPTH:
            raise PathRefused(f"{path} is {len(parts)} folders deep; at most {MAX_DEPTH} are accepted")
        for part in parts:
            if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
                raise PathRefused(f"a name in {path} is longer than {MAX_NAME_BYTES} bytes")
        return PurePosixPath(*parts) if parts else PurePosixPath(".")

    # ----- reading ----------------------------------------------------------------------------------------------

    def kind(self, rel: PurePosixPath) -> str | None:
        """ "file", "dir", "link", "other", or None when nothing is there (or a folder on the way is missing)."""
        try:
            fd = self._dir(rel.parent, create=False)
        except FileNotFoundError:
            return None
        try:
            if rel == PurePosixPath("."):
                return "dir"
            st = os.stat(rel.name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(fd)
        if stat.S_ISLNK(st.st_mode):
            return "link"
        if stat.S_ISREG(st.st_mode):
            return "file"
        return "dir" if stat.S_ISDIR(st.st_mode) else "other"

    def read_bytes(self, rel: PurePosixPath, limit: int | None = None) -> bytes:
        """The regular file's bytes; PathRefused for a link, a folder or anything else, or a file over `limit`."""
        fd = self._dir(rel.parent, create=False)
        try:
            try:
                f = os.open(rel.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                raise _refusal(exc, rel) from None
        finally:
            os.close(fd)
        with os.fdopen(f, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise PathRefused(f"{rel} is not a regular file")
            if limit is not None and st.st_size > limit:
                raise PathRefused(f"{rel} holds {st.st_size} bytes; at most {limit} are read")
            return handle.read()

    def files(self, under: str = ".", skip=lambda rel, is_dir: False) -> list[tuple[PurePosixPath, int]]:
        """(relative path, mode) of every regular file below `under`, sorted; links, devices and whatever `skip`
        names (given each entry's relative path and whether it is a folder) are left out, and no link is followed:
        a folder that is a link yields nothing."""
        return [(rel, mode) for rel, mode in self._entries(under, skip) if stat.S_ISREG(mode)]

    def folders(self, under: str = ".", skip=lambda rel, is_dir: False) -> list[PurePosixPath]:
        """Every folder below `under` (not itself), sorted, as `files` walks them."""
        return [rel for rel, mode in self._entries(under, skip) if stat.S_ISDIR(mode)]

    def _entries(self, under: str, skip) -> list[tuple[PurePosixPath, int]]:
        try:
            start = self.relative(under)
            fd = self._dir(start, create=False)
        except (FileNotFoundError, PathRefused):
            return []
        found: list[tuple[PurePosixPath, int]] = []
        try:
            self._walk(fd, start, skip, found, depth=0)
        finally:
            os.close(fd)
        return sorted(found)

    def _walk(self, fd: int, rel: PurePosixPath, skip, found: list, depth: int) -> None:
        if depth > MAX_DEPTH:
            return
        with os.scandir(fd) as entries:
            listed = sorted((e.name, e.stat(follow_symlinks=False).st_mode) for e in entries)
        for name, mode in listed:
            child = rel / name if rel != PurePosixPath(".") else PurePosixPath(name)
            if skip(child, stat.S_ISDIR(mode)) or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                continue
            found.append((child, mode))
            if stat.S_ISDIR(mode):
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:  # replaced by a link, or gone, since it was listed
                    continue
                try:
                    self._walk(sub, child, skip, found, depth + 1)
                finally:
                    os.close(sub)

    # ----- writing ----------------------------------------------------------------------------------------------

    def write_bytes(self, rel: PurePosixPath, data: bytes, mode: int = 0o644) -> bool:
        """Write the file (its folders made as needed) through an exclusive temporary file; True when it existed."""
        fd = self._dir(rel.parent, create=True)
        try:
            existed = _exists(rel.name, fd)
            tmp = f".{rel.name[:200]}.{secrets.token_hex(6)}.cudagent-tmp"
            try:
                f = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
            except OSError as exc:
                raise _refusal(exc, rel) from None
            try:
                with os.fdopen(f, "wb") as handle:
                    handle.write(data)
                os.replace(tmp, rel.name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException as exc:
                try:
                    os.unlink(tmp, dir_fd=fd)
                except OSError:
                    pass
                if isinstance(exc, OSError):
                    raise _refusal(exc, rel) from None
                raise
            return existed
        finally:
            os.close(fd)

    def remove(self, rel: PurePosixPath) -> None:
        """Remove the file, link or folder (a folder with all it holds, never through a link)."""
        fd = self._dir(rel.parent, create=False)
        try:
            st = os.stat(rel.name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(rel.name, dir_fd=fd)
            else:
                os.unlink(rel.name, dir_fd=fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)

    def remove_empty_folders(self, under: str = ".", keep=(), skip=lambda rel, is_dir: False) -> None:
        """Remove the folders below `under` that hold nothing (deepest first), except those named in `keep`."""
        for folder in sorted(self.folders(under, skip), key=lambda p: len(p.parts), reverse=True):
            if str(folder) in keep:
                continue
            fd = self._dir(folder.parent, create=False)
            try:
                os.rmdir(folder.name, dir_fd=fd)
            except OSError:
                pass
            finally:
                os.close(fd)

    # ----- the walk down ----------------------------------------------------------------------------------------

    def _dir(self, rel: PurePosixPath, create: bool) -> int:
        """An open descriptor of the folder `rel`, reached one component at a time without following a link."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        done = PurePosixPath(".")
        try:
            for part in rel.parts:
                if part in ("", "."):
                    continue
                done = done / part
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _refusal(exc, done, _is_link(part, fd)) from None
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd


def _exists(name: str, fd: int) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _is_link(name: str, fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _refusal(exc: OSError, rel: PurePosixPath, link: bool = False) -> Exception:
    """What an OSError on the way means to the model."""
    if link or exc.errno in (errno.ELOOP, errno.EMLINK):
        return PathRefused(f"{rel} is a symbolic link; links are not followed: use the real path inside the workspace")
    if exc.errno == errno.ENOTDIR:
        return PathRefused(f"{rel} is not a folder")
    if exc.errno == errno.EISDIR:
        return PathRefused(f"{rel} is a folder, not a file")
    if exc.errno == errno.ENOENT:
        return FileNotFoundError(errno.ENOENT, f"{rel} does not exist")
    if exc.errno == errno.ENAMETOOLONG:
        return PathRefused(f"{rel}: a name is too long for the file system")
    return exc
