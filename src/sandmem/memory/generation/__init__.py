"""Owns everything that turns recorded rollouts into memory files, and imports memory's core,
``memory.store``, ``memory.extractive``, ``run`` and the floors below (never ``memory.views``,
the memory API ``sandmem.memory``, ``capabilities`` or anything above).

The per-(session, layout) manager, phase one, phase two, the stop path (``_stop``), attaching
a manager to a session (``_attach``), the store job (``_job``), the consolidation agent's
scoped tools, metering and spans. Callers outside memory use the names re-exported here.
"""

from __future__ import annotations

from sandmem.memory.generation._attach import get_manager
from sandmem.memory.generation._stop import check_schedule, on_stop_read_only, resume_pending
from sandmem.memory.generation.manager import FlushReport, MemoryGenerationManager

__all__ = [
    "FlushReport",
    "MemoryGenerationManager",
    "check_schedule",
    "get_manager",
    "on_stop_read_only",
    "resume_pending",
]
