"""Memory generation: the per-(session, layout) manager, phase one, phase two, the stop path
(``_stop``), the store job (``_job``), the consolidation agent's scoped tools, metering and
spans.

Owns everything that turns recorded rollouts into memory files. It may import memory's core
modules, ``memory.store``, ``memory.extractive``, ``run`` and the floors below; it must not
import ``memory.views``, the memory API (``sandmem.memory``), ``capabilities`` or anything
above. Callers outside memory use the names re-exported here.
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
