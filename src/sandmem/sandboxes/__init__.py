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

from sandmem._errors import (
    ExecTimeoutError,
    ExecTransportError,
    SandboxError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    WorkspaceWriteTypeError,
)
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
