"""Memory stores: the store seam (``_base``: ``MemoryStore``, ``LocalMemoryStore``,
``GenerationScheduler``, versions) and moving a layout between a workspace and a store
(``_sync``: pull, push, three-way merge).

The seam is part of memory's core (``MemoryLayoutConfig`` names it) and imports only the
foundation; ``_sync`` may import memory's core modules and the floors below. Nothing here
imports ``memory.generation``, ``memory.views``, the memory API or anything above; S3 and
the Redis queue live in ``sandmem.distributed``.
"""

from __future__ import annotations

from sandmem.memory.store._base import (
    GenerationScheduler,
    LocalMemoryStore,
    MemoryStore,
    MemoryStoreConflict,
    MemoryStoreError,
    MemoryVersion,
)
from sandmem.memory.store._sync import pull, push_edits, push_segments

__all__ = [
    "GenerationScheduler",
    "LocalMemoryStore",
    "MemoryStore",
    "MemoryStoreConflict",
    "MemoryStoreError",
    "MemoryVersion",
    "pull",
    "push_edits",
    "push_segments",
]
