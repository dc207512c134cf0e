"""Sandboxes: owns the workspaces where agents act (the session seam, the backends, the one
host-filesystem layer, manifests, snapshots, the ``apply_patch`` engine), and imports only the
foundation (never ``agent``, ``run``, ``memory`` or anything above).

    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(entries={"a.txt": File(content=b"hi")}))
    async with session:
        result = await session.exec("cat", "a.txt")

Errors (all in ``sandmem._errors``, all ``SandboxError``): ``SandboxPathError`` (a path leaves
the workspace), ``SandboxStateError`` (a state or snapshot cannot be resumed), the
reference-named ``ExecTimeoutError``, ``ExecTransportError``, ``WorkspaceReadNotFoundError``,
``WorkspaceArchiveReadError``, ``WorkspaceArchiveWriteError``, ``WorkspaceWriteTypeError`` raised
by the public session API, and ``SandboxError`` for any other failed operation. See
``docs/sandboxes.md``.

The host-filesystem layer is ``_hostfs`` over ``_fdwalk``: nothing else opens a workspace
path. Snapshots are local or S3 (``_s3_snapshot``, its client imported only when used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandmem._errors import (
    ExecTimeoutError,
    ExecTransportError,
    SandboxError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    WorkspaceWriteTypeError,
)
from sandmem._lazy import lazy_exports

if TYPE_CHECKING:
    from sandmem.sandboxes._bubblewrap import BubblewrapSandboxClient
    from sandmem.sandboxes._bwrap_host import DEFAULT_READONLY_BINDS
    from sandmem.sandboxes._client import SandboxClient
    from sandmem.sandboxes._local import UnixLocalSandboxClient
    from sandmem.sandboxes._manifest import Dir, File, GitRepo, LocalDir, LocalFile, Manifest
    from sandmem.sandboxes._session import ExecResult, SandboxSession, SandboxSessionState
    from sandmem.sandboxes._snapshot import LocalSnapshotSpec
    from sandmem.sandboxes._types import EntryKind, FileEntry, FileMode, Permissions
    from sandmem.sandboxes._workspace_scope import SandboxWorkspaceScope

__all__ = [  # noqa: RUF022 - plain sorted() order, checked by a test
    "BubblewrapSandboxClient",
    "DEFAULT_READONLY_BINDS",
    "Dir",
    "EntryKind",
    "ExecResult",
    "ExecTimeoutError",
    "ExecTransportError",
    "File",
    "FileEntry",
    "FileMode",
    "GitRepo",
    "LocalDir",
    "LocalFile",
    "LocalSnapshotSpec",
    "Manifest",
    "Permissions",
    "SandboxClient",
    "SandboxError",
    "SandboxSession",
    "SandboxSessionState",
    "SandboxWorkspaceScope",
    "UnixLocalSandboxClient",
    "WorkspaceArchiveReadError",
    "WorkspaceArchiveWriteError",
    "WorkspaceReadNotFoundError",
    "WorkspaceWriteTypeError",
]


#: where each name not imported above is defined (imported on first use: the memory
#: commands need the local backend, not bubblewrap or snapshots)
_WHERE = {
    "BubblewrapSandboxClient": "sandmem.sandboxes._bubblewrap",
    "DEFAULT_READONLY_BINDS": "sandmem.sandboxes._bwrap_host",
    "Dir": "sandmem.sandboxes._manifest",
    "EntryKind": "sandmem.sandboxes._types",
    "ExecResult": "sandmem.sandboxes._session",
    "File": "sandmem.sandboxes._manifest",
    "FileEntry": "sandmem.sandboxes._types",
    "FileMode": "sandmem.sandboxes._types",
    "GitRepo": "sandmem.sandboxes._manifest",
    "LocalDir": "sandmem.sandboxes._manifest",
    "LocalFile": "sandmem.sandboxes._manifest",
    "LocalSnapshotSpec": "sandmem.sandboxes._snapshot",
    "Manifest": "sandmem.sandboxes._manifest",
    "Permissions": "sandmem.sandboxes._types",
    "SandboxClient": "sandmem.sandboxes._client",
    "SandboxSession": "sandmem.sandboxes._session",
    "SandboxSessionState": "sandmem.sandboxes._session",
    "SandboxWorkspaceScope": "sandmem.sandboxes._workspace_scope",
    "UnixLocalSandboxClient": "sandmem.sandboxes._local",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
