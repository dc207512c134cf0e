"""Owns memory stores and moving a layout between a workspace and a store, and imports
memory's core and the floors below (never ``memory.generation``, ``memory.views``, the memory
API or anything above).

The store seam (``_base``: ``MemoryStore``, ``LocalMemoryStore``, ``GenerationScheduler``,
versions) is part of memory's core (``MemoryLayoutConfig`` names it) and imports only the
foundation; ``_sync`` (pull, push, three-way merge) and ``_history_sync`` use memory's core
modules. S3 and the Redis queue live in ``sandmem.distributed``.
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
