"""The extractive fallback of a flush: memory never goes blank because a model failed.

When the model's consolidation failed or was incomplete (``_degrade.needs_fallback``), the
flush consolidates what phase one produced with the extractive engine instead
(``phase_two.consolidate(..., fallback_of=error)``). The model's attempt stays the record of
what failed: its log record (status, error) is written first, and an incomplete result it
committed stays a version in the memory history. The fallback is logged with
``status: fallback`` and ``engine: extractive``; the state records ``fallback`` with the
model's error and no inputs digest, so the next flush plans again and gives the model the same
conversations (the fallback leaves the selection as it was before).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from sandmem.memory.generation import phase_two
from sandmem.memory.rollouts import utc_now
from sandmem.memory.state import GenerationState
from sandmem.models._base import ModelProvider

if TYPE_CHECKING:
    from sandmem.memory.generation.manager import FlushReport, MemoryGenerationManager

logger = logging.getLogger("sandmem.memory")

Save = Callable[[GenerationState, dict[str, Any]], Awaitable[None]]


async def fall_back(
    manager: MemoryGenerationManager,
    state: GenerationState,
    report: FlushReport,
    plan: phase_two.Plan,
    model_error: str,
    provider: ModelProvider,
    save: Save,
) -> None:
    """Consolidate ``plan`` with the extractive engine after the model's ``model_error``;
    ``report`` and ``state`` say so (``fallback``), and ``save`` logs it. A fallback that
    fails too is logged and leaves the model's outcome in ``report``."""
    started = time.monotonic()
    ids = [r.rollout_id for r in plan.selected]
    try:
        result = await phase_two.consolidate(
            manager.session,
            manager.paths,
            manager.config,
            manager.redactor,
            plan,
            utc_now(),
            provider,
            report.phase_two_usage,
            fallback_of=model_error,
        )
    except Exception as exc:
        error = manager.redactor.redact(str(exc))
        logger.warning("memory: the extractive fallback failed too: %s", error)
        await save(
            state,
            {"phase": "two", "status": "failed", "engine": "extractive", "error": error},
        )
        return
    note = f"the model's consolidation did not succeed ({model_error}); consolidated by the "
    note += "extractive engine instead, the model is tried again at the next generation"
    report.phase_two, report.phase_two_error = "fallback", note
    report.phase_two_missing = [r.rollout_id for r in result.verification.missing]
    state.phase_two = state.phase_two.model_copy(
        update={"status": "fallback", "last_error": model_error, "inputs_digest": None}
    )
    await save(
        state,
        {
            "phase": "two",
            "rollouts": ids,
            "status": "fallback",
            "engine": "extractive",
            "error": model_error,
            "duration_s": round(time.monotonic() - started, 3),
            "requests": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "memory_bytes": await manager.memory_bytes(),
        },
    )
