"""Memory: configuration, rollout recording, and the two-phase generation pipeline.

- ``config``: ``MemoryLayoutConfig``, ``MemoryReadConfig``, ``MemoryGenerateConfig``
- ``rollouts``: rollout ids (``validate_rollout_id``) and run segments
- ``storage``: the files of a layout
- ``phase_one`` / ``phase_two``: extraction and consolidation
- ``selection``: which raw memories phase two uses, and what it forgets
- ``manager``: the per-(session, layout) generation manager
- ``extractive``: the deterministic, model-free engine (``"extractive"``)
"""

from __future__ import annotations

from sandmem.memory.config import (
    EXTRACTIVE,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
)
from sandmem.memory.rollouts import validate_rollout_id

__all__ = [
    "EXTRACTIVE",
    "MemoryGenerateConfig",
    "MemoryLayoutConfig",
    "MemoryReadConfig",
    "validate_rollout_id",
]
