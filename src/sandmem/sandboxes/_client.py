"""The ``SandboxClient`` protocol: what a run needs from a backend's client.

``SandboxRunConfig(client=...)`` takes any object with these three methods; the sandmem
clients (``UnixLocalSandboxClient``, ``BubblewrapSandboxClient``) implement it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sandmem.sandboxes._manifest import Manifest
    from sandmem.sandboxes._session import SandboxSession, SandboxSessionState
    from sandmem.sandboxes._snapshot import LocalSnapshotSpec


@runtime_checkable
class SandboxClient(Protocol):
    """Creates, resumes and deletes sandbox sessions of one backend."""

    async def create(
        self,
        manifest: Manifest | None = None,
        snapshot: LocalSnapshotSpec | None = None,
        *,
        options: object = None,
    ) -> SandboxSession:
        """A new session (not started) whose workspace holds the manifest's entries."""
        ...

    async def resume(self, state: SandboxSessionState | str | bytes) -> SandboxSession:
        """A session (not started) restored from a state or its JSON text."""
        ...

    async def delete(self, session: SandboxSession, *, keep_snapshot: bool = False) -> None:
        """Discard the session and remove its workspace (and, unless ``keep_snapshot``, its
        snapshot)."""
        ...
