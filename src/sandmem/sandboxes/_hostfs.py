"""File primitives on a workspace that is a host directory (blocking; run them in a thread).

This is the one module of sandmem that opens workspace paths on the host. Each function takes
the workspace root (a real path) and a caller's path, finds the path with the descriptor walk
of ``_fdwalk`` (component by component from a descriptor of the root, never letting the kernel
follow a symlink; symlinks inside the workspace are expanded by hand and never lead out) and
then acts on the last component relative to its parent's descriptor. ``OSError`` is translated
into ``SandboxError`` with operation and path.

Only regular files are read or written: every file is opened with ``O_NONBLOCK`` and checked
with ``fstat`` first, so a FIFO, socket or device in the workspace gives a clear error instead
of blocking the process. Inside ``_paths.no_symlinks()`` no symlink is followed at all.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sandmem._errors import SandboxError
from sandmem.sandboxes import _fdwalk
from sandmem.sandboxes._paths import PathArg, refusal, symlinks_refused

logger = logging.getLogger("sandmem.sandboxes")

#: ``.<target name>.<writer pid>.<creation time, hex seconds>.<8 random hex>.tmp``
_TEMP_NAME = re.compile(r"\..+\.([0-9]{1,10})\.([0-9a-f]{8,12})\.[0-9a-f]{8}\.tmp")
#: a temp file this old is a leftover even when its writer's pid is alive (pid reuse)
STALE_WRITE_TEMP_S = 60.0


def _temp_name(name: str) -> str:
    stamp = f"{os.getpid()}.{int(time.time()):x}.{secrets.token_hex(4)}"
    return f".{name}.{stamp}.tmp"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale_write_temp(name: str, now: float | None = None) -> bool:
    """True when ``name`` is a temp file of ``write_atomic`` whose write can no longer finish.

    A process killed between creating the temp file and renaming it leaves one behind. The name
    carries the writer's pid and the creation time: the temp is stale when that process is gone,
    or when it is ``STALE_WRITE_TEMP_S`` old (the pid may have been reused). A write in flight,
    in this process or another, is never stale.
    """
    match = _TEMP_NAME.fullmatch(name)
    if match is None:
        return False
    pid, created = int(match.group(1)), int(match.group(2), 16)
    age = (time.time() if now is None else now) - created
    return age >= STALE_WRITE_TEMP_S or (pid != os.getpid() and not _pid_alive(pid))


_REASONS = {
    errno.ENOENT: "no such file or directory",
    errno.EISDIR: "it is a directory",
    errno.ENOTDIR: "it (or one of its parents) is not a directory",
    errno.EEXIST: "it already exists",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOTEMPTY: "the directory is not empty (pass recursive=True to remove its contents)",
    errno.ELOOP: "too many levels of symlinks",
    errno.ENOSPC: "no space left on the device",
    errno.ENXIO: "it is not a regular file (a FIFO or socket with no peer)",
}


@contextlib.contextmanager
def translate_errors(operation: str, path: PathArg) -> Iterator[None]:
    """Turn ``OSError`` into ``SandboxError(operation, path)``, keeping the cause."""
    try:
        yield
    except OSError as exc:
        reason = _REASONS.get(exc.errno or 0, exc.strerror or str(exc))
        raise SandboxError(
            f"{operation} {os.fspath(path)!r} failed: {reason}",
            operation=operation,
            path=os.fspath(path),
        ) from exc


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


# -- finding a path ----------------------------------------------------------------------------


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


class NotRegularFile(SandboxError):
    """The path names a FIFO, socket, device or symlink where a regular file is needed."""


def _not_regular(operation: str, path: PathArg, mode: int) -> NotRegularFile:
    return NotRegularFile(
        f"{operation} {os.fspath(path)!r} refused: it is {_kind(mode)}, not a regular file; "
        "only regular files are read or written",
        operation=operation,
        path=os.fspath(path),
    )


@contextlib.contextmanager
def _located(
    root: Path,
    path: PathArg,
    operation: str,
    *,
    follow_last: bool = True,
    create_parents: bool = False,
) -> Iterator[_fdwalk.Located]:
    """The parent descriptor and last name of ``path`` (closed on exit); ``SandboxPathError``
    when the path leads outside or, under ``no_symlinks()``, through a symlink."""
    raw = os.fspath(path)
    root_s = str(root)
    if not isinstance(raw, str):
        raise refusal(operation, repr(raw), root_s, "the path must be a string")
    strict = symlinks_refused()
    try:
        parts = _fdwalk.lexical_parts(root_s, raw)
        root_fd = os.open(root_s, _fdwalk.DIR_FLAGS)
        try:
            found = _fdwalk.locate(
                root_fd,
                root_s,
                parts,
                follow=not strict,
                follow_last=follow_last and not strict,
                create_parents=create_parents,
            )
        finally:
            os.close(root_fd)
    except _fdwalk.Refused as exc:
        raise refusal(operation, raw, root_s, exc.why) from None
    try:
        yield found
    finally:
        found.close()


def _lstat(loc: _fdwalk.Located) -> os.stat_result | None:
    try:
        return os.stat(loc.name or ".", dir_fd=loc.parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _open_regular(loc: _fdwalk.Located, flags: int, operation: str, path: PathArg) -> int:
    """Open the regular file at ``loc`` without blocking and without following a symlink;
    ``NotRegularFile`` for anything else. Creating (``O_CREAT``) is allowed."""
    if not loc.name:
        raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
    before = _lstat(loc)
    if before is not None and not stat.S_ISREG(before.st_mode):
        if stat.S_ISDIR(before.st_mode):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
        raise _not_regular(operation, path, before.st_mode)
    try:
        fd = os.open(
            loc.name,
            flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o666,
            dir_fd=loc.parent_fd,
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # swapped for a symlink since the lstat
            raise _not_regular(operation, path, stat.S_IFLNK) from exc
        if exc.errno == errno.ENXIO:  # a FIFO or socket that appeared since the lstat
            raise _not_regular(operation, path, stat.S_IFIFO) from exc
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _not_regular(operation, path, st.st_mode)
    os.set_blocking(fd, True)
    return fd


def _warn_symlink(operation: str, path: PathArg) -> None:
    logger.warning(
        "%s %r: skipped a symlink (symlinks are not followed here)", operation, os.fspath(path)
    )


def _read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


# -- primitives --------------------------------------------------------------------------------


def read(root: Path, path: PathArg) -> bytes:
    with translate_errors("read", path), _located(root, path, "read") as loc:
        fd = _open_regular(loc, os.O_RDONLY, "read", path)
        try:
            return _read_fd(fd)
        finally:
            os.close(fd)


def read_many(root: Path, paths: list[str]) -> dict[str, bytes | None]:
    """``read`` for each path in one call; a missing file maps to ``None``. Under
    ``no_symlinks()`` a symlink, FIFO, socket or device also maps to ``None`` (logged)."""
    found: dict[str, bytes | None] = {}
    strict = symlinks_refused()
    for path in paths:
        try:
            found[path] = read(root, path)
        except NotRegularFile:
            if not strict:
                raise
            logger.warning("skipping %r: it is not a regular file", path)
            found[path] = None
        except SandboxError as exc:
            if not isinstance(exc.__cause__, FileNotFoundError | NotADirectoryError):
                raise
            found[path] = None
    return found


def _fsync_dir(fd: int) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on a directory
        os.fsync(fd)


def write_atomic(
    root: Path, path: PathArg, data: bytes | str, *, mode: int | None = None, durable: bool = True
) -> None:
    """Write a temp file next to the target, fsync it, and rename it over the target.

    A write through an inner symlink replaces the symlink's target (under ``no_symlinks()``
    the symlink itself is replaced). The mode of an existing file is kept (``mode`` sets it),
    setuid and setgid bits dropped; a new file gets ``0o666`` minus the umask. ``durable=False``
    skips the fsyncs (for a fresh workspace, where a crash loses the whole workspace anyway).
    """
    payload = _as_bytes(data)
    with (
        translate_errors("write", path),
        _located(root, path, "write", create_parents=True) as loc,
    ):
        if not loc.name:
            raise refusal("write", os.fspath(path), str(root), "it names the workspace root")
        before = _lstat(loc)
        if before is not None and stat.S_ISDIR(before.st_mode):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
        if before is not None and stat.S_ISLNK(before.st_mode):
            _warn_symlink("write", path)
        keep = stat.S_IMODE(before.st_mode) if before and stat.S_ISREG(before.st_mode) else None
        if mode is not None:
            keep = mode
        tmp = _temp_name(loc.name)
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o666,
            dir_fd=loc.parent_fd,
        )
        try:
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                if keep is not None:
                    os.fchmod(fd, keep & ~(stat.S_ISUID | stat.S_ISGID))
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, loc.name, src_dir_fd=loc.parent_fd, dst_dir_fd=loc.parent_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=loc.parent_fd)
            raise
        if durable:
            _fsync_dir(loc.parent_fd)


def append(root: Path, path: PathArg, data: bytes | str) -> None:
    """Append ``data`` to the file (created when missing). A file with more than one hard
    link (another name of it may lie outside the workspace) is never written in place: its
    bytes plus ``data`` replace it (``write_atomic``), which gives the name its own inode and
    leaves every other link unchanged; a warning is logged."""
    payload = _as_bytes(data)
    with (
        translate_errors("append", path),
        _located(root, path, "append", create_parents=True) as loc,
    ):
        fd = _open_regular(loc, os.O_RDWR | os.O_CREAT | os.O_APPEND, "append", path)
        try:
            if os.fstat(fd).st_nlink > 1:
                logger.warning(
                    "append %r: the file has other hard links; replaced it instead of writing "
                    "through them",
                    os.fspath(path),
                )
                payload = _read_fd(fd) + payload
            else:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                return
        finally:
            os.close(fd)
    write_atomic(root, path, payload)


def mkdir(root: Path, path: PathArg, parents: bool = True) -> None:
    with (
        translate_errors("mkdir", path),
        _located(root, path, "mkdir", create_parents=parents) as loc,
    ):
        if not loc.name:
            return
        try:
            os.mkdir(loc.name, 0o777, dir_fd=loc.parent_fd)
        except FileExistsError:
            st = _lstat(loc)
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise refusal(
                    "mkdir",
                    os.fspath(path),
                    str(root),
                    "it is a symlink, which is not followed here",
                ) from None
            if st is None or not stat.S_ISDIR(st.st_mode):
                raise


def _open_dir(loc: _fdwalk.Located) -> int:
    if not loc.name:
        return os.dup(loc.parent_fd)
    return os.open(loc.name, _fdwalk.DIR_FLAGS, dir_fd=loc.parent_fd)


def ls(root: Path, path: PathArg = ".") -> list[str]:
    with translate_errors("ls", path), _located(root, path, "ls") as loc:
        fd = _open_dir(loc)
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)


def _stat_or_none(root: Path, path: PathArg, operation: str) -> os.stat_result | None:
    """The entry's ``lstat`` after expanding inner symlinks; ``None`` when it is missing or,
    under ``no_symlinks()``, a symlink."""
    try:
        with translate_errors(operation, path), _located(root, path, operation) as loc:
            st = _lstat(loc)
    except SandboxError as exc:
        cause = exc.__cause__
        if isinstance(cause, FileNotFoundError | NotADirectoryError):
            return None
        if isinstance(cause, OSError) and cause.errno == errno.ELOOP:
            return None  # a symlink loop inside the workspace
        raise
    if st is not None and stat.S_ISLNK(st.st_mode):
        if symlinks_refused():
            _warn_symlink(operation, path)
        return None  # a dangling inner symlink, or one not followed
    return st


def exists(root: Path, path: PathArg) -> bool:
    return _stat_or_none(root, path, "exists") is not None


def is_dir(root: Path, path: PathArg) -> bool:
    st = _stat_or_none(root, path, "is_dir")
    return st is not None and stat.S_ISDIR(st.st_mode)


def stat_many(root: Path, paths: list[str]) -> dict[str, tuple[int, int] | None]:
    """(size, mtime in ns) of each regular file (after expanding inner symlinks); ``None``
    for a missing path or one that is not a regular file."""
    found: dict[str, tuple[int, int] | None] = {}
    for path in paths:
        st = _stat_or_none(root, path, "stat")
        regular = st is not None and stat.S_ISREG(st.st_mode)
        found[path] = (st.st_size, st.st_mtime_ns) if st is not None and regular else None
    return found


def is_file(root: Path, path: PathArg) -> bool:
    """True for a regular file (after expanding inner symlinks)."""
    st = _stat_or_none(root, path, "is_file")
    return st is not None and stat.S_ISREG(st.st_mode)


def remove(root: Path, path: PathArg, recursive: bool = False) -> None:
    """Remove a file, a symlink (not its target), or a directory (empty unless recursive)."""
    with (
        translate_errors("remove", path),
        _located(root, path, "remove", follow_last=False) as loc,
    ):
        if not loc.name:
            raise refusal("remove", os.fspath(path), str(root), "it names the workspace root")
        st = _lstat(loc)
        if st is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(loc.name, dir_fd=loc.parent_fd)
        elif recursive:
            _remove_tree_at(loc.parent_fd, loc.name)
        else:
            os.rmdir(loc.name, dir_fd=loc.parent_fd)


def rename(root: Path, src: PathArg, dst: PathArg) -> None:
    """``os.replace`` within the workspace; a symlink is moved as the link itself."""
    with (
        translate_errors("rename", src),
        _located(root, src, "rename", follow_last=False) as source,
        _located(root, dst, "rename", follow_last=False, create_parents=True) as dest,
    ):
        for loc, raw in ((source, src), (dest, dst)):
            if not loc.name:
                raise refusal("rename", os.fspath(raw), str(root), "it names the workspace root")
        os.replace(source.name, dest.name, src_dir_fd=source.parent_fd, dst_dir_fd=dest.parent_fd)


def open_lock_file(root: Path, path: PathArg) -> int:
    """Open (creating it and its parents) the lock file and return its descriptor."""
    with (
        translate_errors("lock", path),
        _located(root, path, "lock", create_parents=True) as loc,
    ):
        return _open_regular(loc, os.O_RDWR | os.O_CREAT, "lock", path)


def open_regular_rw(root: Path, path: PathArg, *, _replaced: bool = False) -> int:
    """Open (creating it and its parents, mode 0600) the regular file ``path`` read-write and
    return its descriptor: never through a symlink, never a special file (a derived file
    that a library opens as ``/proc/self/fd/N``, such as the memory index). A file with more
    than one hard link (another name of it may lie outside the workspace) is first replaced
    by a copy of its own, as ``append`` does: nothing is written or chmod-ed through it."""
    with (
        translate_errors("open", path),
        _located(root, path, "open", create_parents=True) as loc,
    ):
        fd = _open_regular(loc, os.O_RDWR | os.O_CREAT, "open", path)
        if os.fstat(fd).st_nlink <= 1:
            os.fchmod(fd, 0o600)
            return fd
        try:
            if _replaced:  # linked again between the replacement and this open
                raise OSError(errno.EMLINK, "it keeps getting other hard links")
            data = _read_fd(fd)
        finally:
            os.close(fd)
    logger.warning(
        "open %r: the file has other hard links; replaced it instead of writing through them",
        os.fspath(path),
    )
    write_atomic(root, path, data, mode=0o600)
    return open_regular_rw(root, path, _replaced=True)


def workdir(root: Path, path: PathArg) -> Path:
    """The host path of the directory ``path`` (inner symlinks expanded), for a command's
    working directory; ``SandboxError`` when it is not a directory in the workspace."""
    with translate_errors("exec", path), _located(root, path, "exec") as loc:
        st = _lstat(loc)
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise SandboxError(
                f"exec: workdir {os.fspath(path)!r} is not a directory in the workspace",
                operation="exec",
                path=os.fspath(path),
            )
        return root.joinpath(*loc.parts)


def write_new_file(
    root: Path, path: PathArg, source: IO[bytes], *, mode: int, mtime: float
) -> None:
    """Create (or truncate) the regular file ``path`` from ``source`` with ``mode`` (setuid
    and setgid dropped) and ``mtime``; no fsync (snapshot restore into a fresh workspace)."""
    with (
        translate_errors("restore", path),
        _located(root, path, "restore", create_parents=True) as loc,
    ):
        fd = _open_regular(loc, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "restore", path)
        try:
            while chunk := source.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            os.fchmod(fd, mode & ~(stat.S_ISUID | stat.S_ISGID))
            os.utime(fd, (mtime, mtime))
        finally:
            os.close(fd)


def symlink(root: Path, path: PathArg, target: str, *, mtime: float | None = None) -> None:
    """Create the symlink ``path`` -> ``target`` (the target is not checked here: see
    ``stays_inside``)."""
    with (
        translate_errors("symlink", path),
        _located(root, path, "symlink", follow_last=False, create_parents=True) as loc,
    ):
        if not loc.name:
            raise refusal("symlink", os.fspath(path), str(root), "it names the workspace root")
        os.symlink(target, loc.name, dir_fd=loc.parent_fd)
        if mtime is not None:
            with contextlib.suppress(OSError, NotImplementedError):
                os.utime(loc.name, (mtime, mtime), dir_fd=loc.parent_fd, follow_symlinks=False)


def stays_inside(root: Path, path: PathArg) -> bool:
    """Whether ``path``, resolved as the kernel would (every symlink followed, ``..`` taken
    from where a link leads), stays inside the workspace. A path that ends at a missing entry
    stays inside; a symlink loop does not count as inside."""
    raw = os.fspath(path)
    try:
        parts = _fdwalk.lexical_parts(str(root), raw)
        root_fd = os.open(root, _fdwalk.DIR_FLAGS)
        try:
            _fdwalk.locate(root_fd, str(root), parts).close()
        finally:
            os.close(root_fd)
    except _fdwalk.Refused:
        return False
    except OSError as exc:
        return exc.errno in (errno.ENOENT, errno.ENOTDIR)
    return True


def set_mode_and_mtime(root: Path, path: PathArg, mode: int, mtime: float) -> None:
    """Set a directory's (or file's) mode, setuid and setgid dropped, and its mtime."""
    with translate_errors("restore", path), _located(root, path, "restore") as loc:
        fd = _open_dir(loc)
        try:
            os.fchmod(fd, mode & ~(stat.S_ISUID | stat.S_ISGID))
            os.utime(fd, (mtime, mtime))
        finally:
            os.close(fd)


def try_flock(fd: int) -> bool:
    """Take an exclusive ``flock`` without blocking; False when another holder has it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


# -- trees -------------------------------------------------------------------------------------


def _remove_tree_at(parent_fd: int, name: str) -> None:
    """Remove the directory ``name`` of ``parent_fd`` and everything below it, read-only
    directories included, without following a symlink (iterative: any depth)."""
    stack: list[tuple[int, str, int | None]] = []  # (parent fd, name, own fd once opened)
    stack.append((os.dup(parent_fd), name, None))
    try:
        while stack:
            pfd, dname, own = stack[-1]
            if own is None:
                own = os.open(dname, _fdwalk.DIR_FLAGS, dir_fd=pfd)
                mode = stat.S_IMODE(os.fstat(own).st_mode)
                if mode & stat.S_IRWXU != stat.S_IRWXU:
                    os.fchmod(own, mode | stat.S_IRWXU)
                stack[-1] = (pfd, dname, own)
            subdir = None
            for entry in os.listdir(own):
                st = os.stat(entry, dir_fd=own, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    subdir = entry
                    break
                os.unlink(entry, dir_fd=own)
            if subdir is not None:
                stack.append((os.dup(own), subdir, None))
                continue
            os.rmdir(dname, dir_fd=pfd)
            os.close(own)
            os.close(pfd)
            stack.pop()
    finally:
        for pfd, _name, own in stack:
            os.close(pfd)
            if own is not None:
                os.close(own)


def remove_tree(path: Path) -> None:
    """Remove a directory tree, read-only directories included (blocking); a symlink or a
    file is unlinked. Nothing outside ``path`` is followed."""
    parent = os.open(path.parent, _fdwalk.DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        st = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            _remove_tree_at(parent, path.name)
        else:
            os.unlink(path.name, dir_fd=parent)
    except FileNotFoundError:
        pass
    finally:
        os.close(parent)


@dataclass(frozen=True)
class TreeEntry:
    """One entry of ``walk_tree``: its workspace-relative path, ``lstat``, the target of a
    symlink, and for a regular file or a directory an open descriptor (valid until the next
    entry)."""

    rel: str
    st: os.stat_result
    link: str | None = None
    fd: int | None = None


def walk_tree(root: Path, *, skip: tuple[int, int] | None = None) -> Iterator[TreeEntry]:
    """Every entry below ``root`` in sorted walk order (a directory before its contents),
    without following symlinks; ``skip`` is the ``(st_dev, st_ino)`` of a directory to leave
    out. Special files are yielded without a descriptor; a regular file swapped for
    something else while walking is skipped."""
    stack: list[tuple[int, str, list[str]]] = []
    top = os.open(root, _fdwalk.DIR_FLAGS)
    stack.append((top, "", sorted(os.listdir(top))))
    try:
        while stack:
            dfd, prefix, names = stack[-1]
            if not names:
                os.close(dfd)
                stack.pop()
                continue
            name = names.pop(0)
            rel = f"{prefix}{name}"
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if skip is not None and (st.st_dev, st.st_ino) == skip:
                continue
            if stat.S_ISLNK(st.st_mode):
                yield TreeEntry(rel, st, link=os.readlink(name, dir_fd=dfd))
            elif stat.S_ISDIR(st.st_mode):
                try:
                    child = os.open(name, _fdwalk.DIR_FLAGS, dir_fd=dfd)
                except OSError:
                    continue
                stack.append((child, rel + "/", sorted(os.listdir(child))))
                yield TreeEntry(rel, st, fd=child)
            elif stat.S_ISREG(st.st_mode):
                try:
                    fd = os.open(
                        name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd
                    )
                except OSError:
                    continue
                try:
                    now = os.fstat(fd)
                    if stat.S_ISREG(now.st_mode):
                        os.set_blocking(fd, True)
                        yield TreeEntry(rel, now, fd=fd)
                finally:
                    os.close(fd)
            else:
                yield TreeEntry(rel, st)
    finally:
        for dfd, _prefix, _names in stack:
            os.close(dfd)


def strip_setid_bits(root: Path) -> list[str]:
    """Clear setuid and setgid bits on every file and directory below ``root`` (symlinks
    are not followed, special files are left alone); returns the paths changed."""
    changed: list[str] = []
    linked: list[tuple[str, bytes, int]] = []
    for entry in walk_tree(root):
        if entry.fd is None or not entry.st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            continue
        mode = stat.S_IMODE(entry.st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
        with contextlib.suppress(OSError):
            if stat.S_ISREG(entry.st.st_mode) and entry.st.st_nlink > 1:
                # another name of it may lie outside: give this name a copy of its own
                linked.append((entry.rel, _read_fd(entry.fd), mode))
                continue
            os.fchmod(entry.fd, mode)
            changed.append(entry.rel)
    for rel, data, mode in linked:
        with contextlib.suppress(OSError, SandboxError):
            write_atomic(root, rel, data, mode=mode, durable=False)
            changed.append(rel)
    return changed


def scan(root: Path, path: PathArg = ".") -> tuple[str, list[tuple[str, os.stat_result]]]:
    """The directory's workspace-relative path (inner symlinks expanded) and its entries
    ``(name, lstat)`` sorted by name; symlinks are reported, not followed (``session.ls``)."""
    with translate_errors("ls", path), _located(root, path, "ls") as loc:
        fd = _open_dir(loc)
        try:
            found = []
            for name in os.listdir(fd):
                with contextlib.suppress(FileNotFoundError):  # removed while listing
                    found.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
        finally:
            os.close(fd)
        return "/".join(loc.parts) or ".", sorted(found, key=lambda e: e[0])


def scan_stats(root: Path, path: PathArg = ".") -> list[tuple[str, int, int, int]]:
    """``(name, file type bits of st_mode, size, mtime in ns)`` of each entry, sorted by name;
    symlinks are reported, not followed (``session.stat_dir``: one ``lstat`` per entry and
    nothing else, for directories of tens of thousands of files)."""
    with translate_errors("ls", path), _located(root, path, "ls") as loc:
        fd = _open_dir(loc)
        try:
            found: list[tuple[str, int, int, int]] = []
            append, lstat, kind_bits = found.append, os.stat, stat.S_IFMT(0o177777)
            for name in os.listdir(fd):
                try:
                    st = lstat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:  # removed while listing
                    continue
                append((name, st.st_mode & kind_bits, st.st_size, st.st_mtime_ns))
        finally:
            os.close(fd)
        found.sort()
        return found


def scan_kinds(root: Path, path: PathArg = ".") -> list[tuple[str, int]]:
    """``(name, file type bits)`` of each entry, sorted by name, from the directory entry's
    own type where the file system gives one (no ``lstat`` per entry, unlike ``scan_stats``;
    ``os.scandir`` falls back to ``lstat`` where it does not); symlinks are reported, not
    followed."""
    with translate_errors("ls", path), _located(root, path, "ls") as loc:
        fd = _open_dir(loc)
        try:
            found: list[tuple[str, int]] = []
            with os.scandir(fd) as listing:
                for entry in listing:
                    try:
                        if entry.is_symlink():
                            bits = stat.S_IFLNK
                        elif entry.is_dir(follow_symlinks=False):
                            bits = stat.S_IFDIR
                        elif entry.is_file(follow_symlinks=False):
                            bits = stat.S_IFREG
                        else:
                            bits = 0
                    except FileNotFoundError:  # removed while listing
                        continue
                    found.append((entry.name, bits))
        finally:
            os.close(fd)
        found.sort()
        return found


def set_dir_mode(root: Path, path: PathArg, mode: int) -> None:
    """Set a directory's permission bits, setuid and setgid dropped (manifest ``Dir``)."""
    with translate_errors("chmod", path), _located(root, path, "chmod") as loc:
        fd = _open_dir(loc)
        try:
            os.fchmod(fd, mode & ~(stat.S_ISUID | stat.S_ISGID))
        finally:
            os.close(fd)
