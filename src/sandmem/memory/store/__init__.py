"""Owns moving a layout between a workspace and a memory store, and imports memory's core and
the floors below (never ``memory.generation``, ``memory.views``, the memory API or anything
above).

The store seam (``MemoryStore``, ``LocalMemoryStore``, ``GenerationScheduler``, versions) is
part of memory's core, ``memory/_store_seam.py`` (``MemoryLayoutConfig`` names it); this
package re-exports it under its public path. ``_sync`` (pull, push, three-way merge) and
``_history_sync`` use memory's core modules. S3 and the Redis queue live in
``sandmem.distributed``. The names below are imported on first use (``_lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandmem._lazy import lazy_exports

if TYPE_CHECKING:
    from sandmem.memory._store_seam import (
        GenerationScheduler,
        LocalMemoryStore,
        MemoryStore,
        MemoryStoreConflict,
        MemoryStoreError,
        MemoryVersion,
    )
    from sandmem.memory.store._read_only import ReadOnlyStore
    from sandmem.memory.store._sync import pull, push_edits, push_segments

__all__ = [
    "GenerationScheduler",
    "LocalMemoryStore",
    "MemoryStore",
    "MemoryStoreConflict",
    "MemoryStoreError",
    "MemoryVersion",
    "ReadOnlyStore",
    "pull",
    "push_edits",
    "push_segments",
]

#: where each name is defined (imported on first use)
_WHERE = {
    "GenerationScheduler": "sandmem.memory._store_seam",
    "LocalMemoryStore": "sandmem.memory._store_seam",
    "MemoryStore": "sandmem.memory._store_seam",
    "MemoryStoreConflict": "sandmem.memory._store_seam",
    "MemoryStoreError": "sandmem.memory._store_seam",
    "MemoryVersion": "sandmem.memory._store_seam",
    "ReadOnlyStore": "sandmem.memory.store._read_only",
    "pull": "sandmem.memory.store._sync",
    "push_edits": "sandmem.memory.store._sync",
    "push_segments": "sandmem.memory.store._sync",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
