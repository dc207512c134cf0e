"""The memory server over a layout kept in a remote memory store (``sandmem mcp --store
s3://bucket/prefix``): the workspace is the server's local copy of the layout.

- reads: the copy is brought up to the store's current memory version before a read tool
  runs (at most once every ``PULL_INTERVAL_S``) and at every look for changes, so clients on
  one host see what a generation on another host committed;
- ``memory_remember``: the note is recorded in the copy, then pushed as a segment;
- ``memory_update``: the edit is made in the copy, then committed as a new version (merged
  three ways with a version another writer made meanwhile, never lost);
- ``memory_generate``: the generation job runs in the store (as a worker's does), then the
  new version is pulled.

The moves are the store's own (``memory.store``: ``pull``, ``push_segments``,
``push_edits``; ``memory.generation._job.run_job``); this module only decides when.
"""

from __future__ import annotations

import time

import anyio

from sandmem.memory import api
from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.generation._job import run_job
from sandmem.memory.generation.manager import FlushReport
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.store import MemoryStore, pull, push_edits, push_segments

#: the shortest time between two pulls made for read tools
PULL_INTERVAL_S = 2.0


class StoreSync:
    """When the server's copy of a layout moves to and from its store."""

    def __init__(self, workspace: str, layout: MemoryLayoutConfig, store: MemoryStore) -> None:
        self.workspace = workspace
        self.layout = layout
        self.paths = MemoryPaths.of(layout)
        self.store = store
        self._pulled_at = -float("inf")
        self._lock = anyio.Lock()

    def describe(self) -> str:
        return self.store.describe()

    async def pull(self, *, fresh: bool = False) -> bool:
        """Bring the store's current version into the copy; skipped when the last pull is
        younger than ``PULL_INTERVAL_S`` unless ``fresh``. True when files changed."""
        async with self._lock:
            if not fresh and time.monotonic() - self._pulled_at < PULL_INTERVAL_S:
                return False
            async with api.open_target(self.workspace, self.layout) as (session, _, _owned):
                changed = await pull(session, self.paths, self.store)
            self._pulled_at = time.monotonic()
            return changed

    async def push_segments(self) -> int:
        async with api.open_target(self.workspace, self.layout) as (session, _, _owned):
            return await push_segments(session, self.paths, self.store)

    async def push_edits(self) -> bool:
        async with api.open_target(self.workspace, self.layout) as (session, _, _owned):
            return await push_edits(session, self.paths, self.store)

    async def generate(self, config: MemoryGenerateConfig) -> FlushReport:
        """Push what the copy recorded, generate in the store, pull the result."""
        await self.push_segments()
        report = await run_job(self.store, self.paths, config)
        await self.pull(fresh=True)
        return report
