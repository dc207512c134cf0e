"""Owns memory stores and moving a layout between a workspace and a store, and imports
memory's core and the floors below (never ``memory.generation``, ``memory.views``, the memory
API or anything above).

The names below are imported on first use (``_lazy``): importing the seam (``_base``) runs
this package's ``__init__``, and ``_sync`` imports ``memory.history``, which imports the seam.

The store seam (``_base``: ``MemoryStore``, ``LocalMemoryStore``, ``GenerationScheduler``,
versions) is part of memory's core (``MemoryLayoutConfig`` names it) and imports only the
foundation; ``_sync`` (pull, push, three-way merge) and ``_history_sync`` use memory's core
modules. S3 and the Redis queue live in ``sandmem.distributed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandmem._lazy import lazy_exports

if TYPE_CHECKING:
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

#: where each name is defined (imported on first use)
_WHERE = {
    "GenerationScheduler": "sandmem.memory.store._base",
    "LocalMemoryStore": "sandmem.memory.store._base",
    "MemoryStore": "sandmem.memory.store._base",
    "MemoryStoreConflict": "sandmem.memory.store._base",
    "MemoryStoreError": "sandmem.memory.store._base",
    "MemoryVersion": "sandmem.memory.store._base",
    "pull": "sandmem.memory.store._sync",
    "push_edits": "sandmem.memory.store._sync",
    "push_segments": "sandmem.memory.store._sync",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
