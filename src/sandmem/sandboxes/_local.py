"""UnixLocalSandboxClient: the workspace is a host directory, commands are host subprocesses.

Convenient and fast, **not isolated**: see ``docs/sandboxes.md`` for what it does not protect.

Extending (a backend that wraps commands, e.g. bubblewrap): subclass
``UnixLocalSandboxSession`` and override ``_command_argv`` (and ``_command_env`` if needed);
subclass ``UnixLocalSandboxClient``, set ``backend_name`` and override ``_make_session``.
File primitives, locks, snapshots and the lifecycle are inherited unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import stat
import tempfile
import uuid
import weakref
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from sandmem._errors import (
    ExecTransportError,
    SandboxError,
    SandboxStateError,
    UserError,
    WorkspaceRootNotFoundError,
)
from sandmem.sandboxes import _hostfs
from sandmem.sandboxes._environment import MINIMAL_HOST_VARIABLES, HostEnvironmentPolicy
from sandmem.sandboxes._manifest import Manifest, validate_env
from sandmem.sandboxes._materialize import write_entries
from sandmem.sandboxes._process import run_command
from sandmem.sandboxes._session import (
    DEFAULT_PRE_STOP_HOOK_TIMEOUT,
    ExecResult,
    FileStat,
    SandboxSession,
    SandboxSessionState,
    parse_state,
    shown_command,
)
from sandmem.sandboxes._snapshot import (
    WORKSPACE_PREFIX,
    LocalSnapshotSpec,
    delete_snapshot,
    restore_into_root,
    restore_snapshot,
)
from sandmem.sandboxes._types import EntryKind, FileEntry, Permissions, entry_kind

#: ``PATH`` given to commands when the host's is not inherited
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: default hard timeout of one command, in seconds
DEFAULT_EXEC_TIMEOUT = 600.0
#: default capture bound per stream (stdout, stderr): the first and the last 1 MiB are kept
DEFAULT_MAX_OUTPUT_BYTES = 2 * 1024 * 1024
#: how often ``lock`` retries an ``flock`` held by another process: first after this, then
#: twice as long each time up to ``_LOCK_POLL_SECONDS``
_LOCK_FIRST_POLL_SECONDS = 0.002
_LOCK_POLL_SECONDS = 0.05


def _positive(name: str, value: float) -> float:
    if not value > 0:
        raise UserError(f"{name} must be a positive number, got {value!r}")
    return value


def _check_env(env: Mapping[str, str] | None, what: str) -> dict[str, str]:
    try:
        return validate_env(dict(env or {}))
    except ValueError as exc:
        raise UserError(f"{what}: {exc}") from None


#: ``entry_kind`` as one lookup (``stat_dir`` classifies tens of thousands of entries)
_KINDS = {
    stat.S_IFDIR: EntryKind.DIRECTORY,
    stat.S_IFREG: EntryKind.FILE,
    stat.S_IFLNK: EntryKind.SYMLINK,
}


class UnixLocalSandboxSession(SandboxSession):
    """A session whose workspace is a host directory and whose commands run on the host."""

    def __init__(
        self,
        state: SandboxSessionState,
        *,
        env: Mapping[str, str] | None = None,
        host_environment: HostEnvironmentPolicy | None = None,
        exec_timeout: float = DEFAULT_EXEC_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        pre_stop_hook_timeout: float = DEFAULT_PRE_STOP_HOOK_TIMEOUT,
    ) -> None:
        super().__init__(state, pre_stop_hook_timeout=pre_stop_hook_timeout)
        self._client_env = dict(env or {})
        self._host_environment = host_environment or HostEnvironmentPolicy()
        self._exec_timeout = exec_timeout
        self._max_output_bytes = max_output_bytes
        self._locks: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()

    # -- commands -----------------------------------------------------------------------------

    def _command_env(self) -> dict[str, str]:
        """The base environment of every command (later wins): the host variables the client's
        policy lets through (read at each call), ``PATH`` and ``LANG`` defaults when missing,
        ``HOME`` = the workspace, the client's ``env``, the manifest's ``environment``."""
        env = self._host_environment.select(os.environ)
        env.setdefault("PATH", DEFAULT_PATH)
        env.setdefault("LANG", "C.UTF-8")
        env["HOME"] = self.display_root
        env.update(self._client_env)
        env.update(self._state.manifest.environment)
        return env

    def _command_argv(self, argv: list[str], workdir: Path) -> list[str]:
        """The argv actually executed for ``argv`` run in ``workdir`` (a host path inside the
        workspace; it is also the process's cwd). Override to wrap commands."""
        return argv

    async def _exec_argv(
        self,
        argv: list[str],
        *,
        timeout: float | None,  # noqa: ASYNC109 - the timeout kills the process group
        workdir: str | None,
        env: dict[str, str] | None,
    ) -> ExecResult:
        """Run ``argv`` in its own process group with the workspace (or ``workdir``) as cwd and
        the environment of ``_command_env`` plus ``env``. After ``timeout`` seconds (default:
        the client's ``exec_timeout``) the whole group is killed and the result has
        ``timed_out=True`` and exit code 124."""
        self._check_not_deleted("exec")
        limit = self._exec_timeout if timeout is None else _positive("exec timeout", timeout)
        full_env = self._command_env()
        full_env.update(_check_env(env, "exec env"))
        cwd = await asyncio.to_thread(self._workdir, workdir)
        try:
            return await run_command(
                self._command_argv(argv, cwd),
                cwd=cwd,
                env=full_env,
                time_limit=limit,
                max_output_bytes=self._max_output_bytes,
            )
        except OSError as exc:
            shown = shown_command(argv)
            raise ExecTransportError(
                f"exec {shown!r} could not start: {exc.strerror or exc}",
                operation="exec",
                command=shown,
            ) from exc

    def _workdir(self, workdir: str | None) -> Path:
        if workdir is None:
            if not self.root.is_dir():
                raise WorkspaceRootNotFoundError(
                    f"exec: the workspace {self.root} no longer exists; create a new session",
                    operation="exec",
                    path=str(self.root),
                )
            return self.root
        return _hostfs.workdir(self.root, self._local(workdir))

    # -- files --------------------------------------------------------------------------------

    def _local(self, path: str | os.PathLike[str]) -> str:
        """A caller's path as the host file layer takes it (workspace-relative, or absolute on
        the host). A backend that shows the workspace elsewhere maps its paths here."""
        return os.fspath(path)

    async def read_bytes(self, path: str) -> bytes:
        self._check_not_deleted("read")
        return await asyncio.to_thread(_hostfs.read, self.root, self._local(path))

    async def read_many(self, paths: Sequence[str]) -> dict[str, bytes | None]:
        self._check_not_deleted("read")
        local = [self._local(path) for path in paths]
        found = await asyncio.to_thread(_hostfs.read_many, self.root, local)
        return {path: found[rel] for path, rel in zip(paths, local, strict=True)}

    async def stat_many(self, paths: Sequence[str]) -> dict[str, FileStat | None]:
        self._check_not_deleted("stat")
        local = [self._local(path) for path in paths]
        found = await asyncio.to_thread(_hostfs.stat_many, self.root, local)
        return {
            p: None if (v := found[rel]) is None else FileStat(*v)
            for p, rel in zip(paths, local, strict=True)
        }

    async def write_bytes(self, path: str, data: bytes | str) -> None:
        self._check_not_deleted("write")
        await asyncio.to_thread(_hostfs.write_atomic, self.root, self._local(path), data)

    async def append(self, path: str, data: bytes | str) -> None:
        self._check_not_deleted("append")
        await asyncio.to_thread(_hostfs.append, self.root, self._local(path), data)

    async def mkdir(self, path: str, parents: bool = True) -> None:
        self._check_not_deleted("mkdir")
        await asyncio.to_thread(_hostfs.mkdir, self.root, self._local(path), parents)

    async def open_host_fd(self, path: str) -> int | None:
        self._check_not_deleted("open")
        return await asyncio.to_thread(_hostfs.open_regular_rw, self.root, self._local(path))

    async def stat_dir(self, path: str) -> list[tuple[str, EntryKind, int, int | None]]:
        self._check_not_deleted("ls")
        found = await asyncio.to_thread(_hostfs.scan_stats, self.root, self._local(path))
        kinds = _KINDS
        other = EntryKind.OTHER
        return [(name, kinds.get(bits, other), size, mtime) for name, bits, size, mtime in found]

    async def kinds_dir(self, path: str) -> list[tuple[str, EntryKind]]:
        self._check_not_deleted("ls")
        found = await asyncio.to_thread(_hostfs.scan_kinds, self.root, self._local(path))
        kinds = _KINDS
        other = EntryKind.OTHER
        return [(name, kinds.get(bits, other)) for name, bits in found]

    async def ls(self, path: str | os.PathLike[str] = ".") -> list[FileEntry]:
        self._check_not_deleted("ls")
        rel, found = await asyncio.to_thread(_hostfs.scan, self.root, self._local(path))
        base = self.display_root if rel == "." else posixpath.join(self.display_root, rel)
        return [
            FileEntry(
                path=posixpath.join(base, name),
                permissions=Permissions.from_mode(st.st_mode),
                owner=str(st.st_uid),
                group=str(st.st_gid),
                size=st.st_size,
                kind=entry_kind(st.st_mode),
                mtime_ns=st.st_mtime_ns,
            )
            for name, st in found
        ]

    async def listdir(self, path: str = ".") -> list[str]:
        self._check_not_deleted("ls")
        return await asyncio.to_thread(_hostfs.ls, self.root, self._local(path))

    async def exists(self, path: str) -> bool:
        self._check_not_deleted("exists")
        return await asyncio.to_thread(_hostfs.exists, self.root, self._local(path))

    async def is_dir(self, path: str) -> bool:
        self._check_not_deleted("is_dir")
        return await asyncio.to_thread(_hostfs.is_dir, self.root, self._local(path))

    async def remove(self, path: str, recursive: bool = False) -> None:
        self._check_not_deleted("remove")
        await asyncio.to_thread(_hostfs.remove, self.root, self._local(path), recursive)

    async def rename(self, src: str, dst: str) -> None:
        self._check_not_deleted("rename")
        await asyncio.to_thread(_hostfs.rename, self.root, self._local(src), self._local(dst))

    @contextlib.asynccontextmanager
    async def lock(
        self,
        path: str,
        timeout: float = 30.0,  # noqa: ASYNC109 - a lock timeout, reported as SandboxError
    ) -> AsyncIterator[None]:
        """Exclusive lock on ``path``: first an in-process ``asyncio`` lock per path (tasks of
        this process queue there and are woken at once), then an ``flock`` on the host file
        ``path`` (created if missing), shared with other processes. Polls the ``flock``
        without blocking the event loop; raises ``SandboxError`` when not acquired within
        ``timeout`` seconds."""
        self._check_not_deleted("lock")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        local = self._path_lock(path)
        try:
            async with asyncio.timeout(timeout):
                await local.acquire()
        except TimeoutError:
            raise _lock_timeout(path, timeout) from None
        try:
            fd = await asyncio.to_thread(_hostfs.open_lock_file, self.root, self._local(path))
            try:
                poll = _LOCK_FIRST_POLL_SECONDS
                while not _hostfs.try_flock(fd):
                    if loop.time() >= deadline:
                        raise _lock_timeout(path, timeout)
                    await asyncio.sleep(poll)
                    poll = min(poll * 2, _LOCK_POLL_SECONDS)
                yield
            finally:
                os.close(fd)  # closing the descriptor releases the flock
        finally:
            local.release()

    def _path_lock(self, path: str) -> asyncio.Lock:
        """The in-process lock of ``path`` on the running loop (an ``asyncio.Lock`` belongs to
        one loop, and ``Runner.run_sync`` starts a loop per call)."""
        locks = self._locks.setdefault(asyncio.get_running_loop(), {})
        return locks.setdefault(posixpath.normpath(path), asyncio.Lock())


def _lock_timeout(path: str, timeout: float) -> SandboxError:
    return SandboxError(
        f"lock {path!r}: still held by another process or task after "
        f"{timeout} s; retry later or raise the timeout",
        operation="lock",
        path=path,
    )


def _prepare_workspace(manifest: Manifest) -> tuple[Path, bool]:
    """Create (or adopt) the workspace directory and write the entries; (real root, owned)."""
    if manifest.root is None:
        root, owned = Path(tempfile.mkdtemp(prefix=WORKSPACE_PREFIX)), True
    else:
        root, owned = manifest.root, False
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SandboxError(
                f"cannot create the workspace directory {root}: {exc.strerror}",
                operation="create",
                path=str(root),
            ) from exc
    root = root.resolve()
    try:
        write_entries(root, manifest.entries)
    except BaseException:
        if owned:
            _hostfs.remove_tree(root)
        raise
    return root, owned


def _check_options(options: object) -> None:
    if options is not None and options != {}:
        raise UserError(
            f"the local sandbox clients take no per-session options (got {options!r}); "
            "configure the client instead (UnixLocalSandboxClient(exec_timeout=...))"
        )


class UnixLocalSandboxClient:
    """Creates, resumes and deletes ``UnixLocalSandboxSession``s.

    Commands inherit the host environment (``inherit_host_environment=True``, as in the
    reference SDK) so that ``python``, ``git`` or ``pytest`` on your ``PATH`` work, except
    variables whose names look like credentials (``*KEY*``, ``*TOKEN*``, ``*SECRET*``,
    ``*PASSWORD*``, ``*CREDENTIAL*``, ``OPENAI_*``, ``AWS_*``, ...): those are passed only when
    named in ``host_environment_allowlist``. With ``inherit_host_environment=False`` only the
    allowlisted variables are passed (default: ``PATH``, locale, ``TERM``, ``TZ``, ``USER``,
    ``LOGNAME``, ``SHELL``). ``HOME`` is the workspace.

    ``env`` is added to the environment of every command (after the host variables, before
    the manifest's ``environment``). ``exec_timeout`` is the default per-command timeout,
    ``max_output_bytes`` the capture bound per stream, ``pre_stop_hook_timeout`` the default
    budget of each pre-stop hook. These settings belong to the client: a resumed session uses
    the settings of the client that resumes it. ``allow_unconfined_linux`` is accepted for
    the reference's sake and changes nothing (this backend never confines commands: see
    ``BubblewrapSandboxClient``).
    """

    backend_name: ClassVar[str] = "unix_local"
    #: what ``inherit_host_environment=False`` keeps when no allowlist is given
    _default_host_allowlist: ClassVar[frozenset[str]] = MINIMAL_HOST_VARIABLES

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        inherit_host_environment: bool = True,
        host_environment_allowlist: Collection[str] | None = None,
        exec_timeout: float = DEFAULT_EXEC_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        pre_stop_hook_timeout: float = DEFAULT_PRE_STOP_HOOK_TIMEOUT,
        allow_unconfined_linux: bool = True,
    ) -> None:
        self.env = _check_env(env, f"{type(self).__name__} env")
        self.host_environment = HostEnvironmentPolicy.of(
            inherit_host_environment,
            host_environment_allowlist,
            default_allowlist=self._default_host_allowlist,
        )
        self.exec_timeout = _positive("exec_timeout", exec_timeout)
        self.max_output_bytes = int(_positive("max_output_bytes", max_output_bytes))
        self.pre_stop_hook_timeout = _positive("pre_stop_hook_timeout", pre_stop_hook_timeout)
        del allow_unconfined_linux  # accepted for the reference's examples; see the docstring

    def _make_session(self, state: SandboxSessionState) -> UnixLocalSandboxSession:
        """Build the session object for ``state``; override in a backend subclass."""
        return UnixLocalSandboxSession(
            state,
            env=self.env,
            host_environment=self.host_environment,
            exec_timeout=self.exec_timeout,
            max_output_bytes=self.max_output_bytes,
            pre_stop_hook_timeout=self.pre_stop_hook_timeout,
        )

    def _backend_settings(self) -> dict[str, object]:
        """Backend data stored in the state and needed to resume; none for unix_local."""
        return {}

    async def create(
        self,
        manifest: Manifest | None = None,
        snapshot: LocalSnapshotSpec | None = None,
        *,
        options: object = None,
    ) -> SandboxSession:
        """A new session (not started) whose workspace holds the manifest's entries.
        ``options`` (the reference's per-session options) must be ``None``."""
        _check_options(options)
        manifest = (manifest or Manifest()).model_copy(deep=True)
        root, owned = await asyncio.to_thread(_prepare_workspace, manifest)
        state = SandboxSessionState(
            session_id=uuid.uuid4().hex,
            backend=self.backend_name,
            manifest=manifest.model_copy(update={"root": root}),
            snapshot=snapshot,
            backend_settings=self._backend_settings(),
            workspace_owned=owned,
        )
        return _proven(self._make_session(state))

    async def resume(self, state: SandboxSessionState | str | bytes) -> SandboxSession:
        """A session (not started) restored from ``state`` or its JSON text.

        With a snapshot spec, the snapshot is restored into the state's workspace root when no
        running session holds that root (as the reference does: code that kept the root sees
        the resumed files), else into a fresh workspace. Without one, the session re-attaches
        to the workspace directory, which must still exist. Invalid states and missing or
        corrupt snapshots raise ``SandboxStateError``.
        """
        state = parse_state(state)
        if state.backend != self.backend_name:
            raise SandboxStateError(
                f"this state belongs to the {state.backend!r} backend; resume it with that "
                f"backend's client, not {type(self).__name__}",
                operation="resume",
            )
        if state.snapshot is not None:
            return _proven(self._make_session(await _restored_state(state, state.snapshot)))
        root_path = state.manifest.root
        if root_path is None or not await asyncio.to_thread(root_path.is_dir):
            raise WorkspaceRootNotFoundError(
                f"cannot resume session {state.session_id}: its workspace {root_path} no longer "
                "exists and the session has no snapshot; create the session with "
                "snapshot=LocalSnapshotSpec(...) to survive losing the workspace",
                operation="resume",
                path=str(root_path),
            )
        real = await asyncio.to_thread(root_path.resolve)
        if real != root_path:  # the proven root was replaced by a link to somewhere else
            raise SandboxStateError(
                f"cannot resume session {state.session_id}: its workspace {root_path} is no "
                f"longer the directory sandmem recorded (it now leads to {real})",
                operation="resume",
                path=str(root_path),
            )
        return _proven(self._make_session(state))

    async def delete(self, session: SandboxSession, *, keep_snapshot: bool = False) -> None:
        """Stop ``session`` without hooks or snapshot, remove its workspace (only when sandmem
        created it) and, unless ``keep_snapshot``, its snapshot. The session cannot be used
        afterwards. (A runner-owned sandbox is deleted with ``keep_snapshot=True``, so its
        state can be resumed later.)"""
        await session._discard()
        state = session.state
        if state.workspace_owned:
            await asyncio.to_thread(_check_removable, session)
            await asyncio.to_thread(_hostfs.remove_tree, session.root)
        if state.snapshot is not None and not keep_snapshot:
            await asyncio.to_thread(delete_snapshot, state.snapshot, state.session_id)


def _proven(session: UnixLocalSandboxSession) -> UnixLocalSandboxSession:
    session._proven = True
    return session


def _check_removable(session: SandboxSession) -> None:
    """``delete`` removes a workspace only when a proven state or ``create`` handed it over,
    and only the directory sandmem made (``sandmem-ws-*``, not a symlink); else it refuses."""
    root = session.root
    why = None
    if not session.proven:
        why = "the session was not created or resumed by this client"
    elif not root.name.startswith(WORKSPACE_PREFIX):
        why = f"its name does not start with {WORKSPACE_PREFIX!r}"
    elif root.is_symlink() or (root.exists() and os.path.realpath(root) != str(root)):
        why = "it is no longer the directory sandmem created there"
    if why is not None:
        raise SandboxStateError(
            f"delete: refusing to remove the workspace {root}: {why}; the directory is kept",
            operation="delete",
            path=str(root),
        )


async def _restored_state(
    state: SandboxSessionState, spec: LocalSnapshotSpec
) -> SandboxSessionState:
    root = await asyncio.to_thread(restore_into_root, spec, state.session_id, state.manifest.root)
    owned = state.workspace_owned
    if root is None:  # the state's root is in use by a running session: a fresh workspace
        root = await asyncio.to_thread(restore_snapshot, spec, state.session_id)
        owned = True
    manifest = state.manifest.model_copy(update={"root": root})
    return state.model_copy(update={"manifest": manifest, "workspace_owned": owned})
