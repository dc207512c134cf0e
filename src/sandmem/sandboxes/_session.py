"""SandboxSession: the narrow backend seam plus what every backend gets for free.

A backend implements the primitives (``exec``, ``read``, ``write``, ``append``, ``mkdir``,
``ls``, ``exists``, ``is_dir``, ``remove``, ``rename``, ``lock``) and optionally
``_start_backend`` / ``_stop_backend``. The lifecycle (``start``/``stop``, pre-stop hooks, the
snapshot taken on stop, ``state``) lives here, so every backend behaves the same.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandmem._errors import SandboxError, SandboxStateError
from sandmem.sandboxes._manifest import Manifest
from sandmem.sandboxes._snapshot import LocalSnapshotSpec, take_snapshot

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
    (``delete`` leaves it).
    """

    model_config = ConfigDict(extra="forbid")

    session_id: str
    backend: str
    manifest: Manifest
    snapshot: LocalSnapshotSpec | None = None
    backend_settings: dict[str, Any] = Field(default_factory=dict)
    workspace_owned: bool = True

    @field_validator("session_id")
    @classmethod
    def _check_session_id(cls, value: str) -> str:
        if not _SESSION_ID_RE.match(value):
            raise ValueError("session_id must be 1-128 characters from [A-Za-z0-9_-]")
        return value


def parse_state(value: SandboxSessionState | str | bytes) -> SandboxSessionState:
    """A state from a model or its JSON text; invalid input raises ``SandboxStateError``."""
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
        self._pre_stop_hook_timeout = pre_stop_hook_timeout
        self._pre_stop_hooks: list[tuple[PreStopHook, float]] = []
        self._running = False
        self._deleted = False
        self._lifecycle_lock = asyncio.Lock()
        #: per-layout memory managers, stored here by the memory capability: they live as long
        #: as the session does
        self._memory_managers: dict[Any, Any] = {}

    # -- identity and state -------------------------------------------------------------------

    @property
    def state(self) -> SandboxSessionState:
        """A copy of the session's state (``manifest.root`` is the workspace)."""
        return self._state.model_copy(deep=True)

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

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the session; a no-op when it is running already."""
        async with self._lifecycle_lock:
            self._check_not_deleted("start")
            if self._running:
                return
            if not await asyncio.to_thread(self._root.is_dir):
                raise SandboxStateError(
                    f"the workspace {self._root} no longer exists; create a new session",
                    operation="start",
                    path=str(self._root),
                )
            await self._start_backend()
            self._running = True

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
                self._running = False
                await self._stop_backend()
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

    async def __aenter__(self) -> SandboxSession:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

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
                self._running = False
                await self._stop_backend()
            self._deleted = True

    def _check_not_deleted(self, operation: str) -> None:
        if self._deleted:
            raise SandboxStateError(
                f"{operation} on a deleted session {self.session_id}; create or resume another",
                operation=operation,
            )

    # -- backend seam -------------------------------------------------------------------------

    async def _start_backend(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Backend hook: acquire what the session needs to run commands."""

    async def _stop_backend(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Backend hook: release it. Called after the hooks and the snapshot."""

    @abc.abstractmethod
    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the timeout kills the process group
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a string runs under ``bash -c``; a sequence is an argv) in the
        workspace (or ``workdir`` inside it)."""

    @abc.abstractmethod
    async def read(self, path: str) -> bytes: ...

    async def read_many(self, paths: Sequence[str]) -> dict[str, bytes | None]:
        """Read several files at once; a file that does not exist maps to ``None``.

        Built on ``read`` for every backend; a backend may override it to batch the reads
        (the local backends read a batch in one worker thread)."""

        async def one(path: str) -> bytes | None:
            try:
                return await self.read(path)
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

    @abc.abstractmethod
    async def write(self, path: str, data: bytes | str) -> None:
        """Replace the file atomically (a reader sees the old or the new bytes, never a mix);
        creates missing parent directories."""

    @abc.abstractmethod
    async def append(self, path: str, data: bytes | str) -> None: ...

    @abc.abstractmethod
    async def mkdir(self, path: str, parents: bool = True) -> None: ...

    @abc.abstractmethod
    async def ls(self, path: str = ".") -> list[str]:
        """Sorted names in the directory."""

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
