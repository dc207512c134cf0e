"""An in-memory sandbox backend: the session seam's test double (exported by ``sandmem.testing``).

The workspace is a dict of files held by the client; nothing touches the host. Commands do not
run: ``exec`` calls the ``exec_handler`` you give (``(argv, workdir, env) -> ExecResult | str``),
or answers exit code 127. Snapshots are not supported (resume re-attaches to the client's copy).
Everything built on the primitives works unchanged: file-like ``read``/``write``, ``ls``,
``rm``, locks, memory recording and generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
import os
import posixpath
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from sandmem._errors import SandboxError, SandboxPathError, UserError
from sandmem.sandboxes._manifest import AnyEntry, Dir, File, Manifest
from sandmem.sandboxes._session import (
    ExecResult,
    SandboxSession,
    SandboxSessionState,
    parse_state,
)
from sandmem.sandboxes._snapshot import LocalSnapshotSpec
from sandmem.sandboxes._types import FileEntry, Permissions, entry_kind

ExecHandler = Callable[
    [list[str], str, dict[str, str]], ExecResult | str | Awaitable[ExecResult | str]
]

_FILE_MODE, _DIR_MODE = 0o100644, 0o040755


@dataclass
class _Store:
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=lambda: {""})
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)


def _fail(operation: str, path: str, code: int) -> SandboxError:
    reason = os.strerror(code).lower()
    error = SandboxError(f"{operation} {path!r} failed: {reason}", operation=operation, path=path)
    error.__cause__ = OSError(code, reason, path)
    if code == errno.ENOENT:
        error.__cause__ = FileNotFoundError(code, reason, path)
    return error


class InMemorySandboxSession(SandboxSession):
    """A session whose workspace lives in memory (see the module docstring)."""

    def __init__(
        self, state: SandboxSessionState, store: _Store, exec_handler: ExecHandler | None
    ) -> None:
        super().__init__(state)
        self._store = store
        self._exec_handler = exec_handler

    # -- paths --------------------------------------------------------------------------------

    def _rel(self, path: str | os.PathLike[str], operation: str) -> str:
        raw = os.fspath(path)
        root = str(self.root)
        if raw.startswith("/"):
            if raw != root and not raw.startswith(root + "/"):
                raise SandboxPathError(
                    f"{operation} {raw!r} refused: the absolute path is outside the workspace",
                    operation=operation,
                    path=raw,
                )
            raw = raw[len(root) :].lstrip("/")
        rel = posixpath.normpath(raw or ".")
        if rel == ".." or rel.startswith("../") or "\x00" in rel:
            raise SandboxPathError(
                f"{operation} {raw!r} refused: '..' leads outside the workspace",
                operation=operation,
                path=raw,
            )
        return "" if rel == "." else rel

    def _parent_ready(self, rel: str, operation: str, path: str, create: bool) -> None:
        parent = posixpath.dirname(rel)
        chain = []
        while parent not in self._store.dirs:
            if parent in self._store.files:
                raise _fail(operation, path, errno.ENOTDIR)
            chain.append(parent)
            parent = posixpath.dirname(parent)
        if chain and not create:
            raise _fail(operation, path, errno.ENOENT)
        self._store.dirs.update(chain)

    def _children(self, rel: str) -> list[str]:
        prefix = f"{rel}/" if rel else ""
        names = {
            p[len(prefix) :].split("/", 1)[0]
            for p in [*self._store.files, *self._store.dirs]
            if p and p.startswith(prefix) and p != rel
        }
        return sorted(names)

    # -- primitives ---------------------------------------------------------------------------

    async def _workspace_present(self) -> bool:
        return True

    async def _exec_argv(
        self,
        argv: list[str],
        *,
        timeout: float | None,  # noqa: ASYNC109 - passed on to the handler's own budget
        workdir: str | None,
        env: dict[str, str] | None,
    ) -> ExecResult:
        self._check_not_deleted("exec")
        cwd = self._rel(workdir or ".", "exec")
        if cwd not in self._store.dirs:
            raise _fail("exec", workdir or ".", errno.ENOTDIR)
        if self._exec_handler is None:
            message = b"InMemorySandboxSession runs no commands; pass exec_handler=...\n"
            return ExecResult(exit_code=127, stdout=b"", stderr=message)
        result = self._exec_handler(argv, cwd or ".", dict(env or {}))
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, str):
            return ExecResult(exit_code=0, stdout=result.encode(), stderr=b"")
        return result

    async def read_bytes(self, path: str) -> bytes:
        self._check_not_deleted("read")
        rel = self._rel(path, "read")
        if rel in self._store.files:
            return self._store.files[rel]
        raise _fail("read", path, errno.EISDIR if rel in self._store.dirs else errno.ENOENT)

    async def write_bytes(self, path: str, data: bytes | str) -> None:
        self._check_not_deleted("write")
        rel = self._rel(path, "write")
        if rel in self._store.dirs:
            raise _fail("write", path, errno.EISDIR)
        self._parent_ready(rel, "write", path, create=True)
        self._store.files[rel] = data.encode() if isinstance(data, str) else bytes(data)

    async def append(self, path: str, data: bytes | str) -> None:
        self._check_not_deleted("append")
        rel = self._rel(path, "append")
        if rel in self._store.dirs:
            raise _fail("append", path, errno.EISDIR)
        self._parent_ready(rel, "append", path, create=True)
        payload = data.encode() if isinstance(data, str) else bytes(data)
        self._store.files[rel] = self._store.files.get(rel, b"") + payload

    async def mkdir(self, path: str, parents: bool = True) -> None:
        self._check_not_deleted("mkdir")
        rel = self._rel(path, "mkdir")
        if rel in self._store.files:
            raise _fail("mkdir", path, errno.EEXIST)
        self._parent_ready(rel, "mkdir", path, create=parents)
        self._store.dirs.add(rel)

    async def ls(self, path: str | os.PathLike[str] = ".") -> list[FileEntry]:
        self._check_not_deleted("ls")
        rel = self._rel(path, "ls")
        if rel not in self._store.dirs:
            code = errno.ENOTDIR if rel in self._store.files else errno.ENOENT
            raise _fail("ls", os.fspath(path), code)
        entries = []
        for name in self._children(rel):
            child = posixpath.join(rel, name)
            is_file = child in self._store.files
            mode = _FILE_MODE if is_file else _DIR_MODE
            entries.append(
                FileEntry(
                    path=posixpath.join(self.display_root, child),
                    permissions=Permissions.from_mode(mode),
                    owner=str(os.getuid()),
                    group=str(os.getgid()),
                    size=len(self._store.files[child]) if is_file else 0,
                    kind=entry_kind(mode),
                )
            )
        return entries

    async def exists(self, path: str) -> bool:
        rel = self._rel(path, "exists")
        return rel in self._store.files or rel in self._store.dirs

    async def is_dir(self, path: str) -> bool:
        return self._rel(path, "is_dir") in self._store.dirs

    async def remove(self, path: str, recursive: bool = False) -> None:
        self._check_not_deleted("remove")
        rel = self._rel(path, "remove")
        if not rel:
            raise SandboxError(
                f"remove {path!r} refused: it names the workspace root itself",
                operation="remove",
                path=path,
            )
        if rel in self._store.files:
            del self._store.files[rel]
            return
        if rel not in self._store.dirs:
            raise _fail("remove", path, errno.ENOENT)
        if self._children(rel) and not recursive:
            raise _fail("remove", path, errno.ENOTEMPTY)
        prefix = rel + "/"
        self._store.files = {p: d for p, d in self._store.files.items() if not p.startswith(prefix)}
        self._store.dirs = {d for d in self._store.dirs if d != rel and not d.startswith(prefix)}

    async def rename(self, src: str, dst: str) -> None:
        self._check_not_deleted("rename")
        old, new = self._rel(src, "rename"), self._rel(dst, "rename")
        if not old or not new:
            raise SandboxError("rename of the workspace root is refused", operation="rename")
        if old in self._store.files:
            if new in self._store.dirs:
                raise _fail("rename", dst, errno.EISDIR)
            self._parent_ready(new, "rename", dst, create=True)
            self._store.files[new] = self._store.files.pop(old)
            return
        if old not in self._store.dirs:
            raise _fail("rename", src, errno.ENOENT)
        self._parent_ready(new, "rename", dst, create=True)
        prefix = old + "/"

        def moved(p: str) -> str:
            return new + p[len(old) :] if p == old or p.startswith(prefix) else p

        self._store.files = {moved(p): d for p, d in self._store.files.items()}
        self._store.dirs = {moved(d) for d in self._store.dirs}

    @contextlib.asynccontextmanager
    async def lock(
        self,
        path: str,
        timeout: float = 30.0,  # noqa: ASYNC109 - a lock timeout, reported as SandboxError
    ) -> AsyncIterator[None]:
        """An in-process lock per path (there is no other process to share with)."""
        self._check_not_deleted("lock")
        key = self._rel(path, "lock")
        held = self._store.locks.setdefault(key, asyncio.Lock())
        try:
            async with asyncio.timeout(timeout):
                await held.acquire()
        except TimeoutError:
            raise SandboxError(
                f"lock {path!r}: still held after {timeout} s", operation="lock", path=path
            ) from None
        try:
            yield
        finally:
            held.release()


class InMemorySandboxClient:
    """Creates, resumes and deletes ``InMemorySandboxSession``s; the workspaces live in this
    client (``resume`` re-attaches to one while the client has it)."""

    backend_name = "in_memory"

    def __init__(self, exec_handler: ExecHandler | None = None) -> None:
        self.exec_handler = exec_handler
        self._stores: dict[str, _Store] = {}

    async def create(
        self,
        manifest: Manifest | None = None,
        snapshot: LocalSnapshotSpec | None = None,
        *,
        options: object = None,
    ) -> SandboxSession:
        if snapshot is not None or options is not None:
            raise UserError("InMemorySandboxClient takes no snapshot and no options")
        manifest = (manifest or Manifest()).model_copy(deep=True)
        session_id = uuid.uuid4().hex
        root = Path(f"/in-memory/{session_id}")
        state = SandboxSessionState(
            session_id=session_id,
            backend=self.backend_name,
            manifest=manifest.model_copy(update={"root": root}),
        )
        store = _Store()
        session = InMemorySandboxSession(state, store, self.exec_handler)
        session._proven = True
        for rel in sorted(manifest.entries):
            await _write_entry(session, rel, manifest.entries[rel])
        self._stores[session_id] = store
        return session

    async def resume(self, state: SandboxSessionState | str | bytes) -> SandboxSession:
        state = parse_state(state)
        store = self._stores.get(state.session_id)
        if state.backend != self.backend_name or store is None:
            raise UserError(
                f"this InMemorySandboxClient has no workspace for session {state.session_id}"
            )
        session = InMemorySandboxSession(state, store, self.exec_handler)
        session._proven = True
        return session

    async def delete(self, session: SandboxSession, *, keep_snapshot: bool = False) -> None:
        await session._discard()
        self._stores.pop(session.session_id, None)


async def _write_entry(session: SandboxSession, rel: str, entry: AnyEntry) -> None:
    if isinstance(entry, File):
        await session.write_bytes(rel, entry.content)
    elif isinstance(entry, Dir):
        await session.mkdir(rel)
        for name in sorted(entry.children):
            await _write_entry(session, f"{rel}/{name}", entry.children[name])
    else:
        raise UserError(
            f"InMemorySandboxClient cannot materialise a {type(entry).__name__} entry ({rel!r})"
        )
