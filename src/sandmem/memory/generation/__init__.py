"""Owns everything that turns recorded rollouts into memory files, and imports memory's core,
``memory.store``, ``memory.extractive``, ``run`` and the floors below (never ``memory.views``,
the memory API ``sandmem.memory``, ``capabilities`` or anything above).

Imports inside run one way (no cycle, typing imports included); each module imports only
modules named after it: ``_attach``, ``_stop``, ``_job``, ``manager`` (a layout's lifetime; a
flush as named steps), ``phase_two`` (with its flush driver), ``_fallback``, ``_brief`` (the
consolidation's brief), ``phase_one`` (with its flush driver), ``_scan`` (the pending scan),
``_settled`` (the settled check), ``_trace``, ``_record`` (the flush's report, log lines, state
writes, problems), and the request gate, metering, the consolidation agent's scoped tools, the
stop-time redaction pass.
Callers outside memory use the names re-exported here.
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
