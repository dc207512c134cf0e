"""Memory file access: the one way sandmem reads, writes, lists, moves and deletes the files of
a memory layout (``memories_dir`` and ``sessions_dir``).

Every function here takes the sandbox session and a workspace-relative path, and

- refuses a path that is not plain after normalisation (absolute, empty, ``.``/``..``
  components, a NUL byte) with ``SandboxPathError``, and a layout-relative name from outside
  (an MCP argument, a record read back from disk) that leaves ``memories_dir`` (``member``);
- runs the session primitive under ``no_symlinks()``: on a host-directory workspace the
  descriptor walk of ``sandboxes/_hostfs.py`` follows no symlink at any depth (a linked
  directory on the way is refused, a link as the last component is not read, listed or
  written through: a write replaces the link itself, a removal removes the link), opens files
  without blocking and refuses FIFOs, sockets and devices, and never writes through a file
  with other hard links (writes replace the file; ``append`` gives it an inode of its own).

A derived file a library must open itself (the search index's SQLite database) is held open
by descriptor (``open_host``, ``HostFile``): the library works on that descriptor, never on
the name, and no other module handles the descriptor.

Callers never opt in: there is no other path to a layout's files. ``tests/memory/
test_file_access.py`` fails when a module of ``sandmem/memory/`` calls a session file
primitive, ``open()``, ``pathlib`` I/O, ``os`` file or descriptor calls, ``shutil`` or
``sqlite3.connect`` on a file on its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import posixpath
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from sandmem._errors import SandboxError, SandboxPathError
from sandmem.sandboxes._paths import no_symlinks
from sandmem.sandboxes._types import EntryKind

if TYPE_CHECKING:
    import sqlite3

    from sandmem.sandboxes._session import FileStat, SandboxSession
    from sandmem.sandboxes._types import FileEntry

logger = logging.getLogger("sandmem.memory")

#: ``(size, mtime_ns)`` of a file (``None`` when the backend gives no mtime)
Stat = tuple[int, int | None]
#: directories below ``skills/`` deeper than this are not entered
MAX_DEPTH = 8


# ---------------------------------------------------------------- names


def _refused(path: object, why: str, operation: str = "memory file") -> SandboxPathError:
    shown = path if isinstance(path, str) else repr(path)
    return SandboxPathError(
        f"{operation} {shown!r} refused: {why}", operation=operation, path=str(shown)
    )


def check(path: str, operation: str = "memory file") -> str:
    """``path`` when it is a plain workspace-relative path (``a/b/c``: no empty, ``.`` or
    ``..`` component, not absolute, no NUL; ``.`` alone is the workspace root);
    ``SandboxPathError`` otherwise."""
    if path == ".":
        return path
    if not isinstance(path, str) or not path:
        raise _refused(path, "it is empty or not a string", operation)
    if "\x00" in path:
        raise _refused(path, "it contains a NUL byte", operation)
    if path.startswith("/"):
        raise _refused(path, "it is absolute; memory files are workspace-relative", operation)
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise _refused(path, "it is not a plain path (an empty, '.' or '..' component)", operation)
    return path


def member(memories_dir: str, name: str, operation: str = "memory file") -> str:
    """The workspace path of ``name``, a name relative to ``memories_dir`` that came from
    outside (a tool argument, a record read from disk): refused when it is absolute, holds a
    NUL or control character or a backslash, or leaves ``memories_dir`` after normalisation."""
    if not isinstance(name, str) or not name.strip():
        raise _refused(name, "it is empty", operation)
    if any(ord(c) < 32 or ord(c) == 127 for c in name) or "\\" in name:
        raise _refused(name, "it holds a control character or a backslash", operation)
    if name.startswith("/"):
        raise _refused(name, "it is absolute; give a name inside the memory directory", operation)
    norm = posixpath.normpath(name)
    if norm in (".", "..") or norm.startswith("../") or norm != name.rstrip("/"):
        raise _refused(name, f"it is not a plain name inside {memories_dir}/", operation)
    return check(f"{memories_dir}/{norm}", operation)


# ---------------------------------------------------------------- reading


async def read(session: SandboxSession, path: str) -> bytes | None:
    """The file's bytes; ``None`` when it is missing, a symlink or not a regular file (those
    two logged)."""
    return (await read_many(session, [path]))[path]


async def read_many(session: SandboxSession, paths: Sequence[str]) -> dict[str, bytes | None]:
    """``read`` for each path in one call."""
    for path in paths:
        check(path)
    with no_symlinks():
        return await session.read_many(list(paths))


async def read_text(session: SandboxSession, path: str) -> str | None:
    """The file's text (invalid UTF-8 replaced), or ``None`` when it is missing or cannot be
    read (a link, a FIFO, a directory: skipped with a warning, never followed or waited on)."""
    try:
        data = await read(session, path)
    except SandboxError as exc:
        if not isinstance(exc.__cause__, FileNotFoundError | NotADirectoryError):
            logger.warning("skipping %s: %s", path, exc)
        return None
    return None if data is None else data.decode("utf-8", "replace")


async def read_isolated(
    session: SandboxSession, paths: list[str]
) -> tuple[dict[str, bytes | None], dict[str, str]]:
    """``read_many`` where one unreadable file (a directory, a link on the way, a permission
    error) fails alone: it is left out and reported by path."""
    try:
        return await read_many(session, paths), {}
    except SandboxError:
        pass
    found: dict[str, bytes | None] = {}
    problems: dict[str, str] = {}
    for path in paths:
        try:
            found[path] = await read(session, path)
        except SandboxError as exc:
            problems[path] = f"unreadable: {exc}"
    return found, problems


async def stat_many(session: SandboxSession, paths: Sequence[str]) -> dict[str, FileStat | None]:
    """Size and mtime of each regular file (``None``: missing, a link, a special file)."""
    for path in paths:
        check(path)
    with no_symlinks():
        return await session.stat_many(list(paths))


async def size(session: SandboxSession, path: str) -> int | None:
    """The size of the regular file at ``path`` on disk, in bytes (``None``: missing, a link,
    a special file) — the one number every report of a memory file's size shows (``memory
    status``/``tree``, the viewer, the demo), never the length of a decoded or cleaned text."""
    found = (await stat_many(session, [path]))[path]
    return None if found is None else found.size


async def exists(session: SandboxSession, path: str) -> bool:
    """Whether an entry other than a symlink is there (a link, or a link on the way, counts
    as missing)."""
    path = check(path)
    try:
        with no_symlinks():
            return await session.exists(path)
    except SandboxPathError:
        return False


async def is_dir(session: SandboxSession, path: str) -> bool:
    """Whether ``path`` is a directory reached without a link."""
    path = check(path)
    try:
        with no_symlinks():
            return await session.is_dir(path)
    except SandboxPathError:
        return False


async def kind(session: SandboxSession, path: str) -> EntryKind | None:
    """What is at ``path`` itself (``None``: nothing), in a few calls whatever the size of its
    directory and without reading it: ``FILE`` for a regular file, ``DIRECTORY``, or
    ``OTHER`` for a link (never followed), FIFO, socket or device. A regular file another
    writer creates while this looks is reported as ``FILE``: every other verdict is checked
    again after it is reached (nothing sandmem does turns a regular file into another kind)."""
    if (await stat_many(session, [path]))[path] is not None:
        return EntryKind.FILE
    found: EntryKind | None
    if await exists(session, path):  # not a link: a directory, a special file (or a new file)
        found = EntryKind.DIRECTORY if await is_dir(session, path) else EntryKind.OTHER
    else:
        try:  # a link, or nothing: renaming an entry onto itself changes nothing
            await rename(session, path, path)
        except SandboxError:
            return None
        found = EntryKind.OTHER
    if (await stat_many(session, [path]))[path] is not None:
        return EntryKind.FILE  # a file another writer made since the first look
    return found


async def listdir(session: SandboxSession, path: str) -> list[str]:
    """The names in the directory (``SandboxError`` when it is missing, a link, a file)."""
    with no_symlinks():
        return await session.listdir(check(path))


async def stat_dir(
    session: SandboxSession, path: str
) -> list[tuple[str, EntryKind, int, int | None]]:
    """``(name, kind, size, mtime_ns)`` of each entry; links are reported, never followed."""
    with no_symlinks():
        return await session.stat_dir(check(path))


async def kinds_dir(session: SandboxSession, path: str) -> list[tuple[str, EntryKind]]:
    """``(name, kind)`` of each entry, without the ``lstat`` per entry of ``stat_dir``;
    links are reported, never followed."""
    with no_symlinks():
        return await session.kinds_dir(check(path))


async def entries(
    session: SandboxSession,
    top: str,
    *,
    depth: int = MAX_DEPTH,
    hidden: bool = False,
    dirs: list[str] | None = None,
) -> dict[str, tuple[EntryKind, int, int | None]]:
    """Every entry below ``top`` that is not a directory (regular files, links, special
    files: ``(kind, size, mtime_ns)``), by workspace path, walking ``depth`` levels of
    subdirectories without following a link; names starting with ``.`` only with ``hidden``.
    ``dirs``, when given, receives the path of every subdirectory seen (entered or not)."""
    found: dict[str, tuple[EntryKind, int, int | None]] = {}
    pending = [(check(top), 0)]
    directory_kind = EntryKind.DIRECTORY
    while pending:
        directory, level = pending.pop()
        try:
            listed = await stat_dir(session, directory)
        except SandboxError:
            continue  # missing, a link, or not a directory
        prefix = f"{directory}/"
        for name, kind, size, mtime in listed:
            if name[0] == "." and not hidden:
                continue
            if kind != directory_kind:
                found[prefix + name] = (kind, size, mtime)
                continue
            if dirs is not None:
                dirs.append(prefix + name)
            if level < depth:
                pending.append((prefix + name, level + 1))
    return found


async def walk(
    session: SandboxSession,
    top: str,
    *,
    depth: int = MAX_DEPTH,
    hidden: bool = False,
    dirs: list[str] | None = None,
) -> dict[str, Stat]:
    """Regular files below ``top`` (``depth`` levels of subdirectories) with their stat,
    by workspace path; links and special files are left out, never followed; names starting
    with ``.`` only with ``hidden`` (``dirs``: as ``entries``)."""
    file = EntryKind.FILE
    found = await entries(session, top, depth=depth, hidden=hidden, dirs=dirs)
    return {path: (size, mtime) for path, (kind, size, mtime) in found.items() if kind == file}


# ---------------------------------------------------------------- writing


async def write(session: SandboxSession, path: str, data: bytes | str) -> None:
    """Replace the file atomically (a link or special file there is replaced, not followed;
    parents are created, never through a link)."""
    with no_symlinks():
        await session.write(check(path), data)


async def append(session: SandboxSession, path: str, data: bytes | str) -> None:
    """Append to the file (created when missing); a file with other hard links is replaced
    by a copy of its own first."""
    with no_symlinks():
        await session.append(check(path), data)


#: the hidden directory ``mark_changed`` makes and removes
CHANGE_MARK = ".appended"


async def mark_changed(session: SandboxSession, directory: str) -> None:
    """Move ``directory``'s mtime after a file in it was appended to (an append moves only
    the file's own): the hidden directory ``CHANGE_MARK`` is made in it and removed at once
    (no data, no fsync). The layout index's quick check relies on it. Never raises: when
    something planted there refuses it, the quick check's time bound still holds."""
    mark = f"{directory}/{CHANGE_MARK}" if directory not in ("", ".") else CHANGE_MARK
    try:
        await mkdir(session, mark, parents=False)
        await remove(session, mark, missing_ok=True)  # another writer's may be gone already
    except SandboxError as exc:
        logger.warning("could not mark %s as changed: %s", directory, exc)


async def mkdir(session: SandboxSession, path: str, parents: bool = True) -> None:
    """Create the directory (and its parents), never through a link."""
    with no_symlinks():
        await session.mkdir(check(path), parents=parents)


async def remove(
    session: SandboxSession, path: str, *, recursive: bool = False, missing_ok: bool = False
) -> None:
    """Remove a file, a link (never its target) or a directory (its contents with
    ``recursive``, links inside removed as links)."""
    with no_symlinks():
        try:
            await session.remove(check(path), recursive=recursive)
        except SandboxError as exc:
            if not (missing_ok and isinstance(exc.__cause__, FileNotFoundError)):
                raise


async def rename(session: SandboxSession, src: str, dst: str) -> None:
    """Move an entry (a link moves as the link itself)."""
    with no_symlinks():
        await session.rename(check(src), check(dst))


class HostFile:
    """A regular layout file held open by descriptor (``open_host``): every use reaches the
    file that was checked when it was opened, whatever its name points to later. Only this
    module touches the descriptor."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def _open(self) -> int:
        if self._fd is None:
            raise ValueError("the file was closed")
        return self._fd

    def size(self) -> int:
        """The file's size in bytes now."""
        return os.fstat(self._open()).st_size

    def truncate(self) -> None:
        """Empty the file."""
        os.ftruncate(self._open(), 0)

    def connect_sqlite(self) -> sqlite3.Connection:
        """An SQLite connection to this file, reading only the pages a query needs. SQLite is
        given ``/proc/self/fd/N``; it resolves that to the open file's own current path (not a
        link, nor a file put at the old name since) and opens the path: only an entry renamed
        onto that path in the instant between its resolution and its open would be opened
        instead (``docs/security.md``, known limits). Close the connection before the file."""
        import sqlite3

        return sqlite3.connect(f"/proc/self/fd/{self._open()}")

    def close(self) -> None:
        """Close the descriptor (once; it drops this process's locks on the file)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


async def open_host(session: SandboxSession, path: str) -> HostFile | None:
    """The regular file ``path`` held open read-write by descriptor, created when missing
    (``None`` on a backend whose files are not host files: use ``read`` / ``write``);
    ``SandboxError`` when a link (at any depth) or a special file is there. The caller
    closes it."""
    with no_symlinks():
        fd = await session.open_host_fd(check(path))
    return None if fd is None else HostFile(fd)


#: the layout locks this task holds: ``(id(session), path)``
_HELD: contextvars.ContextVar[frozenset[tuple[int, str]]] = contextvars.ContextVar(
    "sandmem_memory_locks", default=frozenset()
)


#: how long a writer waits for a layout's lock (``memories_dir/.lock``, ``sessions_dir/.lock``)
#: by default: a consolidation holds it while it runs. The one default; the waits that differ
#: say why where they are named (a review's run end ``_run_review.REVIEW_LOCK_TIMEOUT_S``, a
#: stop's redaction pass, the MCP server's tool calls, try-locks that must not wait)
LOCK_TIMEOUT_S = 60.0


@contextlib.asynccontextmanager
async def lock(
    session: SandboxSession,
    path: str,
    timeout: float | None = None,  # noqa: ASYNC109 - a lock timeout, reported as SandboxError
) -> AsyncIterator[None]:
    """``async with lock(session, path):`` the layout's exclusive lock (the lock file is
    opened without following a link), waited for ``timeout`` seconds (default
    ``LOCK_TIMEOUT_S``, read at each call). Re-entrant within one task: code that already
    holds it (a flush preparing its layout) passes straight through."""
    wait = LOCK_TIMEOUT_S if timeout is None else timeout
    key = (id(session), check(path))
    held = _HELD.get()
    if key in held:
        yield
        return
    async with contextlib.AsyncExitStack() as stack:
        with no_symlinks():
            await stack.enter_async_context(session.lock(path, timeout=wait))
        token = _HELD.set(held | {key})
        try:
            yield
        finally:
            _HELD.reset(token)


async def read_bytes(session: SandboxSession, path: str) -> bytes:
    """The file's bytes; ``SandboxError`` when it is missing, a link or not a regular file."""
    with no_symlinks():
        return await session.read_bytes(check(path))


async def ls(session: SandboxSession, path: str) -> list[FileEntry]:
    """The directory's entries (``session.ls``); links are reported, never followed."""
    with no_symlinks():
        return await session.ls(check(path))
