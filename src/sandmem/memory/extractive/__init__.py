"""Owns the ``extractive`` engine (memory generated deterministically, without a model), and
imports memory's core modules and the floors below (never ``memory.generation``, which calls
it, ``memory.views`` or anything above).

Selected with ``phase_one_model="extractive"`` and/or ``phase_two_model="extractive"``. The
pipeline calls two pure functions (no I/O, no clock, no randomness):

- :func:`extract` — phase one: a rollout file's text → :class:`PhaseOneArtifacts` (or ``None``
  when there is nothing to remember);
- :func:`consolidate` — phase two: :class:`ConsolidationInputs` → ``MEMORY.md`` and
  ``memory_summary.md``.

Both redact secrets from what they return. See ``docs/extractive.md``.
"""

from __future__ import annotations

from sandmem.memory.extractive.phase_one import (
    RAW_MEMORY_MAX_BYTES,
    SLUG_MAX_CHARS,
    SUMMARY_MAX_BYTES,
    extract,
)
from sandmem.memory.extractive.phase_two import consolidate

__all__ = [
    "RAW_MEMORY_MAX_BYTES",
    "SLUG_MAX_CHARS",
    "SUMMARY_MAX_BYTES",
    "consolidate",
    "extract",
]
