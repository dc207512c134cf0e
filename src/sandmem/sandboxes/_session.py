"""SandboxSession: the narrow backend seam plus what every backend gets for free.

A backend implements the primitives (``_exec_argv``, ``read_bytes``, ``write_bytes``,
``append``, ``mkdir``, ``ls``, ``exists``, ``is_dir``, ``remove``, ``rename``, ``lock``) and
optionally ``_start_backend`` / ``_stop_backend``. The lifecycle (``start``/``stop``/``aclose``,
pre-stop hooks, the snapshot taken on stop, ``state``) and the reference-shaped public forms
(``exec(*command, shell=...)``, file-like ``read``/``write``, ``rm``, ``running()``) live here,
built on those primitives, so every backend behaves the same.

Internal code uses the bytes-level helpers (``read_bytes``, ``read_many``, ``listdir``,
``write``/``append`` with bytes or str); the file-like forms are the public edge.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import io
import logging
import os
import re
import shlex
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandmem._errors import (
    ExecTimeoutError,
    SandboxError,
    SandboxPathError,
    SandboxStateError,
    UserError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceIOError,
    WorkspaceReadNotFoundError,
    WorkspaceRootNotFoundError,
    WorkspaceWriteTypeError,
)
from sandmem.sandboxes import _ownership
from sandmem.sandboxes._manifest import Manifest
from sandmem.sandboxes._s3_snapshot import S3SnapshotSpec
from sandmem.sandboxes._snapshot import (
    LocalSnapshotSpec,
    acquire_live_lock,
    release_live_lock,
    take_snapshot,
)
from sandmem.sandboxes._types import EntryKind, FileEntry

logger = logging.getLogger("sandmem.sandboxes")

PreStopHook = Callable[[], Awaitable[None]]

#: default time budget of each pre-stop hook (memory generation may call a model several times)
DEFAULT_PRE_STOP_HOOK_TIMEOUT = 900.0
#: after a hook is cancelled at its timeout, how long to let it clean up
_HOOK_CANCEL_GRACE = 1.0
_SESSION_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    #: True when output beyond the capture bound was discarded
    truncated: bool = False

    @property
    def output(self) -> str:
        """stdout then stderr, decoded with replacement."""
        return (self.stdout + self.stderr).decode("utf-8", "replace")

    def ok(self) -> bool:
        """True when the command exited with code 0."""
        return self.exit_code == 0 and not self.timed_out


#: what ``exec`` accepts as one part of a command
CommandPart = str | os.PathLike[str]


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes | str: ...


def build_argv(
    command: tuple[CommandPart | Sequence[CommandPart], ...], shell: bool | Sequence[str]
) -> list[str]:
    """The argv ``exec(*command, shell=shell)`` runs.

    A single list or tuple is an argv run as is (sandmem's earlier form). Otherwise the parts
    are stringified; with ``shell`` true a single part is the shell script itself and several
    parts are joined with ``shlex.join`` (so ``exec("echo", "a b")`` prints ``a b``), then run
    under ``bash -c`` (or under the prefix given as ``shell=[...]``); with ``shell=False`` the
    parts are the argv.
    """
    if len(command) == 1 and isinstance(command[0], list | tuple):
        parts = [os.fspath(part) for part in command[0]]
        shell = False
    else:
        parts = [os.fspath(part) for part in command]  # type: ignore[arg-type]
    if not parts or any(not isinstance(part, str) for part in parts):
        raise UserError("exec: the command is empty or has a part that is not a string or path")
    if not shell:
        return parts
    script = parts[0] if len(parts) == 1 else shlex.join(parts)
    prefix = ["bash", "-c"] if shell is True else [str(part) for part in shell]
    return [*prefix, script]


def shown_command(argv: Sequence[str]) -> str:
    """How a command is named in errors: the script of ``bash -c SCRIPT``, else the argv."""
    if len(argv) == 3 and argv[0] == "bash" and argv[1] == "-c":
        return argv[2]
    return shlex.join(argv)


async def payload_bytes(data: object) -> bytes:
    """Bytes for ``write(path, data)``: bytes-like, str (UTF-8) or a readable file object."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    if isinstance(data, str):
        return data.encode("utf-8")
    read = getattr(data, "read", None)
    if callable(read):
        reader: _Readable = data  # type: ignore[assignment]
        chunk = reader.read() if isinstance(data, io.BytesIO | io.StringIO) else None
        if chunk is None:
            chunk = await asyncio.to_thread(reader.read)
        return chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)
    raise WorkspaceWriteTypeError(
        f"write: cannot write a {type(data).__name__}; pass bytes, str or a readable file "
        "object such as io.BytesIO(...)",
        operation="write",
    )


@dataclass(frozen=True)
class FileStat:
    """What ``stat_many`` reports of a file: its size and, where the backend knows it, its
    modification time in nanoseconds (``None`` otherwise: then only the size says whether the
    file changed, so callers that need certainty read the file)."""

    size: int
    mtime_ns: int | None = None


class SandboxSessionState(BaseModel):
    """JSON-serialisable: enough to resume the session in a new process.

    ``client.resume(SandboxSessionState.model_validate_json(text))`` (or ``client.resume(text)``)
    restores the session. ``workspace_owned`` says whether sandmem created the workspace
    directory (``delete`` removes it) or the caller chose it with ``Manifest(root=...)``
    (``delete`` leaves it). ``proof`` makes the state tamper-evident: a state whose root,
    ownership, snapshot or any other field was changed after ``session.state`` wrote it is
    refused by ``resume`` with ``SandboxStateError``.
    """

    model_config = ConfigDict(extra="forbid")

    session_id: str
    backend: str
    manifest: Manifest
    #: a remote spec is tried first: its ``type`` is ``"s3"``, a local one's ``"local"``
    snapshot: S3SnapshotSpec | LocalSnapshotSpec | None = None
    backend_settings: dict[str, Any] = Field(default_factory=dict)
    workspace_owned: bool = True
    #: HMAC of the other fields under the host's state key (``sandboxes/_ownership.py``): set
    #: by ``SandboxSession.state``, checked by every ``resume``
    proof: str | None = None

    @field_validator("session_id")
    @classmethod
    def _check_session_id(cls, value: str) -> str:
        if not _SESSION_ID_RE.match(value):
            raise ValueError("session_id must be 1-128 characters from [A-Za-z0-9_-]")
        return value

    def signed(self) -> SandboxSessionState:
        """A copy carrying this host's proof, for a state you vouch for: one saved by sandmem
        0.1 (before states carried a proof, ``resume`` refuses them) or one you wrote yourself.
        Signing vouches for every field, root and ownership included: never sign a state that
        came from a place others can write."""
        state = self.model_copy(deep=True, update={"proof": None})
        state.proof = _ownership.sign(state.model_dump(mode="json"))
        return state


def parse_state(value: SandboxSessionState | str | bytes) -> SandboxSessionState:
    """A state from a model or its JSON text, parsed and proven (``_ownership.verify``): the
    one entry point of a state from outside the process. Invalid or changed input raises
    ``SandboxStateError``."""
    state = _parse_state(value)
    _ownership.verify(state.model_dump(mode="json"), "resume")
    return state


def _parse_state(value: SandboxSessionState | str | bytes) -> SandboxSessionState:
    if isinstance(value, SandboxSessionState):
        return value
    if not isinstance(value, str | bytes):
        raise SandboxStateError(
            f"cannot resume from a {type(value).__name__}: pass a SandboxSessionState or its "
            "JSON text (session.state.model_dump_json())",
            operation="resume",
        )
    try:
        return SandboxSessionState.model_validate_json(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()[:5]
        )
        raise SandboxStateError(
            f"the session state is not valid ({problems}); pass the unmodified JSON of "
            "session.state",
            operation="resume",
        ) from None


def _hook_name(hook: PreStopHook) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)


def _consume_result(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()  # mark retrieved: the failure was logged already or is irrelevant


async def run_pre_stop_hook(hook: PreStopHook, budget: float) -> bool:
    """Run one hook with its own time budget; never raise because of the hook.

    Returns True when the *caller* was cancelled while the hook ran (the hook is then
    cancelled, and the caller should finish its cleanup and re-raise the cancellation).
    """
    name = _hook_name(hook)
    try:
        task: asyncio.Future[None] = asyncio.ensure_future(hook())
    except Exception:
        logger.exception("pre-stop hook %s failed; the stop continues", name)
        return False
    task.add_done_callback(_consume_result)
    try:
        done, _ = await asyncio.wait({task}, timeout=budget)
    except asyncio.CancelledError:
        task.cancel()
        logger.warning("stop was cancelled during pre-stop hook %s; the hook was cancelled", name)
        return True
    if not done:
        task.cancel()
        logger.error("pre-stop hook %s timed out after %s s; the stop continues", name, budget)
        try:
            await asyncio.wait({task}, timeout=_HOOK_CANCEL_GRACE)
        except asyncio.CancelledError:
            return True
        return False
    if task.cancelled():
        logger.error("pre-stop hook %s was cancelled; the stop continues", name)
    elif (exc := task.exception()) is not None:
        logger.error("pre-stop hook %s failed; the stop continues", name, exc_info=exc)
    return False


class SandboxSession(abc.ABC):
    """A live workspace. ``async with session:`` starts and stops it.

    Paths are workspace-relative; escapes raise ``SandboxPathError``. Host failures raise
    ``SandboxError`` carrying the operation and path.
    """

    def __init__(
        self,
        state: SandboxSessionState,
        *,
        pre_stop_hook_timeout: float = DEFAULT_PRE_STOP_HOOK_TIMEOUT,
    ) -> None:
        if state.manifest.root is None:
            raise SandboxStateError("the session state has no workspace root", operation="init")
        self._state = state
        self._root = Path(state.manifest.root)
        self._proven = False
        self._pre_stop_hook_timeout = pre_stop_hook_timeout
        self._pre_stop_hooks: list[tuple[PreStopHook, float]] = []
        self._running = False
        self._deleted = False
        self._lifecycle_lock = asyncio.Lock()
        #: held while running when the session has a snapshot spec (see ``acquire_live_lock``)
        self._live_fd: int | None = None
        #: per-layout memory managers, stored here by the memory capability: they live as long
        #: as the session does
        self._memory_managers: dict[Any, Any] = {}
        #: per-directory stop-time redaction of memory files (layouts without a manager)
        self._memory_redactions: dict[str, Any] = {}

    # -- identity and state -------------------------------------------------------------------

    @property
    def state(self) -> SandboxSessionState:
        """A copy of the session's state (``manifest.root`` is the workspace), signed so that
        ``client.resume`` can tell it from an edited one."""
        return self._state.signed()

    @property
    def proven(self) -> bool:
        """True when the session came from its client's ``create`` or from a ``resume`` of a
        proven state: only then does ``client.delete`` remove a workspace it owns."""
        return self._proven

    @property
    def session_id(self) -> str:
        return self._state.session_id

    @property
    def root(self) -> Path:
        """Host path of the workspace root (a real path: no symlinks)."""
        return self._root

    @property
    def display_root(self) -> str:
        """The workspace root as commands see it (the host path here; ``/workspace`` for a
        backend that mounts the workspace elsewhere). Shown to the model."""
        return str(self._root)

    @property
    def is_running(self) -> bool:
        """True between ``start()`` and ``stop()``."""
        return self._running

    async def running(self) -> bool:
        """The reference's form of ``is_running``: True between ``start()`` and ``stop()``."""
        return self._running

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the session; a no-op when it is running already."""
        async with self._lifecycle_lock:
            self._check_not_deleted("start")
            if self._running:
                return
            if not await self._workspace_present():
                raise WorkspaceRootNotFoundError(
                    f"the workspace {self._root} no longer exists; create a new session",
                    operation="start",
                    path=str(self._root),
                )
            await self._start_backend()
            self._running = True
            if self._state.snapshot is not None:
                self._live_fd = await asyncio.to_thread(
                    acquire_live_lock, self._state.snapshot, self.session_id
                )

    async def _set_stopped(self) -> None:
        self._running = False
        if self._live_fd is not None and self._state.snapshot is not None:
            release_live_lock(self._state.snapshot, self.session_id, self._live_fd)
            self._live_fd = None
        await self._stop_backend()

    async def stop(self) -> None:
        """Run the pre-stop hooks, take the snapshot (when the session has a snapshot spec),
        and stop. A no-op when the session is not running.

        A hook that fails, times out or is cancelled is logged and skipped: it never prevents
        the snapshot or the stop. When ``stop`` itself is cancelled, the remaining hooks are
        skipped, the snapshot is still taken, then the cancellation propagates. A snapshot
        failure raises ``SandboxError`` after the session is stopped.
        """
        async with self._lifecycle_lock:
            if not self._running:
                return
            cancelled = False
            try:
                for hook, timeout in list(self._pre_stop_hooks):
                    if cancelled:
                        logger.warning(
                            "pre-stop hook %s skipped: stop was cancelled", _hook_name(hook)
                        )
                        continue
                    cancelled = await run_pre_stop_hook(hook, timeout)
                if self._state.snapshot is not None:
                    snapshot_cancelled = await self._snapshot_uncancellable(self._state.snapshot)
                    cancelled = cancelled or snapshot_cancelled
            finally:
                await self._set_stopped()
            if cancelled:
                raise asyncio.CancelledError

    async def _snapshot_uncancellable(self, spec: LocalSnapshotSpec) -> bool:
        snap = asyncio.ensure_future(take_snapshot(self, spec))
        try:
            await asyncio.shield(snap)
        except asyncio.CancelledError:
            await snap  # a second cancellation gives up waiting; the snapshot still completes
            return True
        return False

    async def shutdown(self) -> None:
        """Release what the session holds without running hooks or taking a snapshot (the
        reference's teardown step). After ``stop()`` there is nothing left to release, so this
        is then a no-op; the workspace stays, and the session can be started again."""
        async with self._lifecycle_lock:
            if self._running:
                await self._set_stopped()

    async def aclose(self) -> None:
        """``stop()`` (hooks, then the snapshot), then ``shutdown()``: what leaving
        ``async with session:`` does, for code that manages the session by hand. The workspace
        stays on disk; ``client.delete(session)`` removes it."""
        try:
            await self.stop()
        finally:
            await self.shutdown()

    async def __aenter__(self) -> SandboxSession:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def register_pre_stop_hook(self, hook: PreStopHook, *, timeout: float | None = None) -> None:
        """Run ``hook()`` at the start of every ``stop()``, before the snapshot, in order of
        registration. Each call gets ``timeout`` seconds (default: the client's
        ``pre_stop_hook_timeout``). Registering the same hook again is a no-op."""
        if any(existing == hook for existing, _ in self._pre_stop_hooks):
            return
        budget = self._pre_stop_hook_timeout if timeout is None else timeout
        self._pre_stop_hooks.append((hook, budget))

    def unregister_pre_stop_hook(self, hook: PreStopHook) -> None:
        self._pre_stop_hooks = [(h, t) for h, t in self._pre_stop_hooks if h != hook]

    async def _discard(self) -> None:
        """Stop without hooks or snapshot and refuse further use (``client.delete``)."""
        async with self._lifecycle_lock:
            if self._running:
                await self._set_stopped()
            self._deleted = True

    def _check_not_deleted(self, operation: str) -> None:
        if self._deleted:
            raise SandboxStateError(
                f"{operation} on a deleted session {self.session_id}; create or resume another",
                operation=operation,
            )

    # -- backend seam -------------------------------------------------------------------------

    async def _workspace_present(self) -> bool:
        """Backend hook: whether the workspace still exists (default: the host directory)."""
        return await asyncio.to_thread(self._root.is_dir)

    async def _start_backend(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Backend hook: acquire what the session needs to run commands."""

    async def _stop_backend(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Backend hook: release it. Called after the hooks and the snapshot."""

    async def exec(
        self,
        *command: CommandPart | Sequence[CommandPart],
        timeout: float | None = None,  # noqa: ASYNC109 - the timeout kills the process group
        shell: bool | Sequence[str] = True,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        raise_on_timeout: bool = True,
    ) -> ExecResult:
        """Run a command in the workspace (or ``workdir`` inside it) and return its exit code
        and bounded output.

        ``exec("ls -la | head")`` runs a shell script; ``exec("git", "log", "-1")`` joins the
        parts with ``shlex.join`` and runs them in the shell; with ``shell=False`` the parts
        are the argv; ``shell=["sh", "-c"]`` picks another shell prefix. A single list is an
        argv run without a shell. ``env`` is added to the session's environment.

        At ``timeout`` seconds (default: the client's ``exec_timeout``) the whole process group
        is killed and ``ExecTimeoutError`` is raised, carrying the partial ``result``; with
        ``raise_on_timeout=False`` that result (``timed_out=True``, exit code 124) is returned
        instead. A command that cannot start raises ``ExecTransportError``.
        """
        argv = build_argv(command, shell)
        result = await self._exec_argv(argv, timeout=timeout, workdir=workdir, env=env)
        if result.timed_out and raise_on_timeout:
            shown = shown_command(argv)
            raise ExecTimeoutError(
                f"exec {shown!r} was killed at its timeout; pass a longer timeout=, or "
                "raise_on_timeout=False to get the partial output as a result",
                command=shown,
                timeout_s=timeout,
                result=result,
            )
        return result

    @abc.abstractmethod
    async def _exec_argv(
        self,
        argv: list[str],
        *,
        timeout: float | None,  # noqa: ASYNC109 - the timeout kills the process group
        workdir: str | None,
        env: dict[str, str] | None,
    ) -> ExecResult:
        """Backend primitive: run ``argv`` (never empty) and report a timeout in the result
        (``timed_out=True``) rather than raising; raise ``ExecTransportError`` when it cannot
        start."""

    async def read(self, path: str | os.PathLike[str]) -> io.BytesIO:
        """The file's content as a file object (``(await session.read(p)).read()``).

        A missing file raises ``WorkspaceReadNotFoundError`` (also a ``FileNotFoundError``);
        other failures ``WorkspaceArchiveReadError``; a path outside the workspace
        ``SandboxPathError``."""
        try:
            return io.BytesIO(await self.read_bytes(os.fspath(path)))
        except SandboxError as exc:
            translated = _as_io_error(exc, "read")
            if translated is None:
                raise
            raise translated from exc

    @abc.abstractmethod
    async def read_bytes(self, path: str) -> bytes:
        """Backend primitive: the file's bytes (failures raise ``SandboxError`` whose cause
        is the ``OSError``)."""

    async def read_many(self, paths: Sequence[str]) -> dict[str, bytes | None]:
        """Read several files at once; a file that does not exist maps to ``None``.

        Built on ``read_bytes`` for every backend; a backend may override it to batch the reads
        (the local backends read a batch in one worker thread)."""

        async def one(path: str) -> bytes | None:
            try:
                return await self.read_bytes(path)
            except SandboxError as exc:
                if isinstance(exc.__cause__, FileNotFoundError):
                    return None
                raise

        results = await asyncio.gather(*(one(path) for path in paths))
        return dict(zip(paths, results, strict=True))

    async def stat_many(self, paths: Sequence[str]) -> dict[str, FileStat | None]:
        """Size (and modification time, where known) of several regular files; a missing
        file maps to ``None``. Built on ``read_many`` (size only) for every backend; the local
        backends override it with one ``stat`` per file in one worker thread, reading nothing.
        """
        found = await self.read_many(paths)
        return {p: None if data is None else FileStat(len(data)) for p, data in found.items()}

    async def write(self, path: str | os.PathLike[str], data: object) -> None:
        """Replace the file atomically with ``data``: bytes, str (written as UTF-8) or a
        readable file object (``io.BytesIO(...)``, an open file); creates missing parents.

        Data of another type raises ``WorkspaceWriteTypeError``; a failed write
        ``WorkspaceArchiveWriteError``; a path outside the workspace ``SandboxPathError``."""
        payload = await payload_bytes(data)
        try:
            await self.write_bytes(os.fspath(path), payload)
        except SandboxError as exc:
            translated = _as_io_error(exc, "write")
            if translated is None:
                raise
            raise translated from exc

    @abc.abstractmethod
    async def write_bytes(self, path: str, data: bytes | str) -> None:
        """Backend primitive: replace the file atomically (a reader sees the old or the new
        bytes, never a mix); creates missing parent directories."""

    async def rm(self, path: str | os.PathLike[str], recursive: bool = False) -> None:
        """Remove a file, a symlink or an empty directory; with ``recursive`` a directory tree,
        and a missing path is then not an error. Failures raise ``WorkspaceArchiveWriteError``.
        """
        try:
            await self.remove(os.fspath(path), recursive=recursive)
        except SandboxError as exc:
            if recursive and isinstance(exc.__cause__, FileNotFoundError):
                return
            translated = _as_io_error(exc, "rm")
            if translated is None:
                raise
            raise translated from exc

    async def open_host_fd(self, path: str) -> int | None:
        """A read-write descriptor of the regular file ``path`` (created, with its parents,
        when missing), opened through the host-filesystem layer without following a symlink;
        the caller closes it. ``None`` on a backend whose files are not host files (then use
        ``read_bytes`` / ``write``). For derived files a library such as SQLite must open
        itself (as ``/proc/self/fd/N``): the descriptor pins the file that was checked."""
        return None

    @abc.abstractmethod
    async def ls(self, path: str | os.PathLike[str] = ".") -> list[FileEntry]:
        """The directory's entries sorted by name, each a ``FileEntry`` (path as commands see
        it, permissions, owner, group, size, kind)."""

    async def stat_dir(self, path: str) -> list[tuple[str, EntryKind, int, int | None]]:
        """``(name, kind, size, mtime_ns or None)`` of each entry of the directory, sorted by
        name; symlinks are reported, not followed. Built on ``ls``; the local backends
        override it with one ``lstat`` per entry and no ``FileEntry`` (a layout of 10,000
        conversations lists 30,000 entries)."""
        return [(e.name, e.kind, e.size, e.mtime_ns) for e in await self.ls(path)]

    async def kinds_dir(self, path: str) -> list[tuple[str, EntryKind]]:
        """``(name, kind)`` of each entry of the directory, sorted by name; symlinks are
        reported, not followed. Built on ``stat_dir``; the local backends override it with the
        directory entries' own types (no ``lstat`` per entry)."""
        return [(name, kind) for name, kind, _size, _mtime in await self.stat_dir(path)]

    async def listdir(self, path: str = ".") -> list[str]:
        """Sorted names in the directory (internal helper; built on ``ls``)."""
        return [entry.name for entry in await self.ls(path)]

    @abc.abstractmethod
    async def append(self, path: str, data: bytes | str) -> None: ...

    @abc.abstractmethod
    async def mkdir(self, path: str, parents: bool = True) -> None: ...

    @abc.abstractmethod
    async def exists(self, path: str) -> bool: ...

    @abc.abstractmethod
    async def is_dir(self, path: str) -> bool:
        """True when ``path`` is a directory (following inner symlinks)."""

    @abc.abstractmethod
    async def remove(self, path: str, recursive: bool = False) -> None: ...

    @abc.abstractmethod
    async def rename(self, src: str, dst: str) -> None:
        """Atomic rename within the workspace (replaces an existing file ``dst``)."""

    @abc.abstractmethod
    def lock(
        self, path: str, timeout: float = 30.0
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """``async with session.lock(path):`` an exclusive lock shared with other processes;
        raises ``SandboxError`` after ``timeout`` seconds."""


def _as_io_error(exc: SandboxError, operation: str) -> SandboxError | None:
    """The reference-named error for a failed public file operation, or ``None`` to re-raise
    ``exc`` as it is (path and state errors, and errors already in the family)."""
    if isinstance(exc, SandboxPathError | SandboxStateError | WorkspaceIOError):
        return None
    cls: type[SandboxError]
    if operation == "read":
        missing = isinstance(exc.__cause__, FileNotFoundError)
        cls = WorkspaceReadNotFoundError if missing else WorkspaceArchiveReadError
    else:
        cls = WorkspaceArchiveWriteError
    return cls(str(exc), operation=exc.operation or operation, path=exc.path)
