"""File primitives on a workspace that is a host directory (blocking; run them in a thread).

Each function takes the workspace root (a real path) and a caller's path, checks the path with
``resolve_path`` and translates ``OSError`` into ``SandboxError`` with operation and path.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from sandmem._errors import SandboxError
from sandmem.sandboxes._paths import PathArg, resolve_path

#: ``.<target name>.<writer pid>.<creation time, hex seconds>.<8 random hex>.tmp``
_TEMP_NAME = re.compile(r"\..+\.([0-9]{1,10})\.([0-9a-f]{8,12})\.[0-9a-f]{8}\.tmp")
#: a temp file this old is a leftover even when its writer's pid is alive (pid reuse)
STALE_WRITE_TEMP_S = 60.0


def _temp_name(target: Path) -> Path:
    stamp = f"{os.getpid()}.{int(time.time()):x}.{secrets.token_hex(4)}"
    return target.with_name(f".{target.name}.{stamp}.tmp")


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


def _refuse_root(root: Path, target: Path, operation: str, path: PathArg) -> None:
    if target == root:
        raise SandboxError(
            f"{operation} {os.fspath(path)!r} refused: it names the workspace root itself",
            operation=operation,
            path=os.fspath(path),
        )


def read(root: Path, path: PathArg) -> bytes:
    with translate_errors("read", path):
        return resolve_path(root, path, operation="read").read_bytes()


def read_many(root: Path, paths: list[str]) -> dict[str, bytes | None]:
    """``read`` for each path in one call; a missing file maps to ``None``."""
    found: dict[str, bytes | None] = {}
    for path in paths:
        try:
            found[path] = read(root, path)
        except SandboxError as exc:
            if not isinstance(exc.__cause__, FileNotFoundError):
                raise
            found[path] = None
    return found


def write_atomic(root: Path, path: PathArg, data: bytes | str) -> None:
    """Write a temp file next to the target, fsync it, and rename it over the target.

    A write through an inner symlink replaces the symlink's target. The mode of an existing
    file is kept; a new file gets ``0o666`` minus the umask.
    """
    payload = _as_bytes(data)
    with translate_errors("write", path):
        target = resolve_path(root, path, operation="write")
        _refuse_root(root, target, "write", path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            mode = None
        tmp = _temp_name(target)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def append(root: Path, path: PathArg, data: bytes | str) -> None:
    payload = _as_bytes(data)
    with translate_errors("append", path):
        target = resolve_path(root, path, operation="append")
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        with os.fdopen(fd, "ab") as fh:
            fh.write(payload)


def mkdir(root: Path, path: PathArg, parents: bool = True) -> None:
    with translate_errors("mkdir", path):
        target = resolve_path(root, path, operation="mkdir")
        target.mkdir(parents=parents, exist_ok=True)


def ls(root: Path, path: PathArg = ".") -> list[str]:
    with translate_errors("ls", path):
        return sorted(os.listdir(resolve_path(root, path, operation="ls")))


def exists(root: Path, path: PathArg) -> bool:
    return resolve_path(root, path, operation="exists").exists()


def is_dir(root: Path, path: PathArg) -> bool:
    return resolve_path(root, path, operation="is_dir").is_dir()


def remove(root: Path, path: PathArg, recursive: bool = False) -> None:
    """Remove a file, a symlink (not its target), or a directory (empty unless recursive)."""
    with translate_errors("remove", path):
        target = resolve_path(root, path, operation="remove", follow_symlinks=False)
        _refuse_root(root, target, "remove", path)
        if target.is_symlink() or not target.is_dir():
            target.unlink()
        elif recursive:
            remove_tree(target)
        else:
            target.rmdir()


def rename(root: Path, src: PathArg, dst: PathArg) -> None:
    """``os.replace`` within the workspace; a symlink is moved as the link itself."""
    with translate_errors("rename", src):
        source = resolve_path(root, src, operation="rename", follow_symlinks=False)
        dest = resolve_path(root, dst, operation="rename", follow_symlinks=False)
        _refuse_root(root, source, "rename", src)
        _refuse_root(root, dest, "rename", dst)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, dest)


def open_lock_file(root: Path, path: PathArg) -> int:
    """Open (creating it and its parents) the lock file and return its descriptor."""
    with translate_errors("lock", path):
        target = resolve_path(root, path, operation="lock")
        target.parent.mkdir(parents=True, exist_ok=True)
        return os.open(target, os.O_RDWR | os.O_CREAT, 0o666)


def try_flock(fd: int) -> bool:
    """Take an exclusive ``flock`` without blocking; False when another holder has it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _ensure_owner_rwx(path: str) -> None:
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    if mode & stat.S_IRWXU != stat.S_IRWXU:
        os.chmod(path, mode | stat.S_IRWXU)


def remove_tree(path: Path) -> None:
    """Remove a directory tree, read-only directories included (blocking)."""
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    _ensure_owner_rwx(str(path))
    for dirpath, dirnames, _files in os.walk(path):
        for name in dirnames:
            child = os.path.join(dirpath, name)
            if not os.path.islink(child):
                _ensure_owner_rwx(child)
    shutil.rmtree(path)
