"""Sandboxes: workspaces where agents act, with snapshots to carry them across processes.

    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(entries={"a.txt": File(content=b"hi")}))
    async with session:
        result = await session.exec("cat a.txt")

Errors: ``SandboxPathError`` (a path leaves the workspace), ``SandboxStateError`` (a state or
snapshot cannot be resumed), ``SandboxError`` (any other failed operation); all in
``sandmem._errors``. See ``docs/sandboxes.md``.
"""

from __future__ import annotations

from sandmem.sandboxes._bubblewrap import BubblewrapSandboxClient
from sandmem.sandboxes._bwrap_host import DEFAULT_READONLY_BINDS
from sandmem.sandboxes._local import UnixLocalSandboxClient
from sandmem.sandboxes._manifest import Dir, File, Manifest
from sandmem.sandboxes._session import ExecResult, SandboxSession, SandboxSessionState
from sandmem.sandboxes._snapshot import LocalSnapshotSpec

__all__ = [  # noqa: RUF022 - plain sorted() order, checked by a test
    "BubblewrapSandboxClient",
    "DEFAULT_READONLY_BINDS",
    "Dir",
    "ExecResult",
    "File",
    "LocalSnapshotSpec",
    "Manifest",
    "SandboxSession",
    "SandboxSessionState",
    "UnixLocalSandboxClient",
]
