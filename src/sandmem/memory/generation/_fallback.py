"""The extractive fallback of a flush: memory never goes blank because a model failed.

When the model's consolidation failed or was incomplete (``_degrade.needs_fallback``), the
flush consolidates what phase one produced with the extractive engine instead
(``phase_two.consolidate(..., fallback_of=error)``, which ``phase_two`` hands in). The model's
attempt stays the record of what failed: its log record (status, error) is written first, and
an incomplete result it committed stays a version in the memory history. The fallback is logged with
``status: fallback`` and ``engine: extractive``; the state records ``fallback`` with the
model's error and no inputs digest, so the next flush plans again and gives the model the same
conversations (the fallback leaves the selection as it was before).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from sandmem.memory.generation._record import FlushRecord
from sandmem.memory.state import GenerationState

logger = logging.getLogger("sandmem.memory")

#: runs the extractive consolidation after the model's error; returns the conversations it
#: still left out (``phase_two`` gives it: this module only records)
Consolidate = Callable[[str], Awaitable[list[str]]]


async def fall_back(
    record: FlushRecord,
    state: GenerationState,
    ids: list[str],
    model_error: str,
    consolidate: Consolidate,
) -> None:
    """Consolidate ``ids`` with the extractive engine after the model's ``model_error``; the
    record and ``state`` say so (``fallback``), and the log has a line of it. A fallback that
    fails too is logged and leaves the model's outcome in the report."""
    started = time.monotonic()
    report = record.report
    try:
        missing = await consolidate(model_error)
    except Exception as exc:
        error = record.redactor.redact(str(exc))
        logger.warning("memory: the extractive fallback failed too: %s", error)
        await record.save_forced(
            state,
            {"phase": "two", "status": "failed", "engine": "extractive", "error": error},
        )
        return
    note = f"the model's consolidation did not succeed ({model_error}); consolidated by the "
    note += "extractive engine instead, the model is tried again at the next generation"
    report.phase_two, report.phase_two_error = "fallback", note
    report.phase_two_missing = missing
    state.phase_two = state.phase_two.model_copy(
        update={"status": "fallback", "last_error": model_error, "inputs_digest": None}
    )
    await record.save_forced(
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
            "memory_bytes": await record.memory_bytes(),
        },
    )
