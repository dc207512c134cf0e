"""``ReadOnlyStore``: a memory store seen by a reader that must never change it (a named scope
attached read-only, ``docs/scopes.md``).

Reads pass through. A write of memory — a segment, a version, a pending mark — raises
``MemoryStoreError`` (nothing that serves a read-only scope calls one; this is the floor). A
pull keeps the store's history mirror on its way (``_history_sync``: it uploads the versions
the workspace made and prunes old ones); through this store that upkeep is skipped, so the
mirror stays as the store's writers left it.
"""

from __future__ import annotations

from sandmem.memory._store_seam import MemoryStore, MemoryStoreError, MemoryVersion


class ReadOnlyStore(MemoryStore):
    """``inner`` for reading only (see the module docstring)."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner

    def _refused(self, what: str) -> MemoryStoreError:
        return MemoryStoreError(
            f"{self.inner.describe()} is attached read-only: {what} refused", retryable=False
        )

    async def put_segment(
        self, sessions_dir: str, rollout_id: str, data: bytes, *, sequence: str | None = None
    ) -> str:
        raise self._refused("a segment")

    async def segments(self, sessions_dir: str) -> dict[str, list[bytes]]:
        return await self.inner.segments(sessions_dir)

    async def current(self, memories_dir: str) -> MemoryVersion | None:
        return await self.inner.current(memories_dir)

    async def read_files(
        self, memories_dir: str, version: MemoryVersion, paths: list[str]
    ) -> dict[str, bytes]:
        return await self.inner.read_files(memories_dir, version, paths)

    async def commit(
        self,
        memories_dir: str,
        base: MemoryVersion | None,
        files: dict[str, bytes],
        *,
        fence: int = 0,
        fresh: bool = False,
    ) -> MemoryVersion:
        raise self._refused("a new version")

    async def mark_pending(self, memories_dir: str, sessions_dir: str) -> None:
        raise self._refused("a pending mark")

    async def pending_marks(self, memories_dir: str) -> list[str]:
        return await self.inner.pending_marks(memories_dir)

    async def clear_marks(self, memories_dir: str, marks: list[str]) -> None:
        raise self._refused("clearing marks")

    async def prefetch(self, memories_dir: str) -> None:
        await self.inner.prefetch(memories_dir)

    async def put_history(self, memories_dir: str, files: dict[str, bytes]) -> None:
        return None  # the mirror's upkeep is its writers'

    async def history_names(self, memories_dir: str) -> list[str]:
        return await self.inner.history_names(memories_dir)

    async def read_history(self, memories_dir: str, names: list[str]) -> dict[str, bytes]:
        return await self.inner.read_history(memories_dir, names)

    async def delete_history(self, memories_dir: str, names: list[str]) -> None:
        return None  # the mirror's upkeep is its writers'

    def describe(self) -> str:
        return self.inner.describe()
