"""The spans of memory generation: names and attributes (``sandmem.tracing`` draws the tree).

The flush and its phases open the spans (``tracing.aspan``) and call the ``*_done`` functions
here with what the phase produced, so their code gains a line per span, not a block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandmem import tracing

if TYPE_CHECKING:
    from sandmem._usage import Usage
    from sandmem.memory.generation._record import FlushReport
    from sandmem.memory.layout import MemoryPaths
    from sandmem.memory.selection import SelectionDiff

FLUSH = "sandmem.memory.flush"
PHASE_ONE = "sandmem.memory.phase_one"
PHASE_TWO = "sandmem.memory.phase_two"
ROLLOUT = "sandmem.memory.rollout_id"


def layout(paths: MemoryPaths) -> dict[str, Any]:
    return {
        "sandmem.memory.memories_dir": paths.memories_dir,
        "sandmem.memory.sessions_dir": paths.sessions_dir,
    }


def _usage(spent: Usage) -> dict[str, Any]:
    return {
        "gen_ai.usage.input_tokens": spent.input_tokens,
        "gen_ai.usage.output_tokens": spent.output_tokens,
    }


def _error_type(error: str) -> str:
    """The class in ``"<Type>: message"``."""
    head = error.split(":", 1)[0].strip()
    return head if head.isidentifier() else "error"


def phase_one_done(span: tracing.Span, status: str, spent: Usage, error: str | None) -> None:
    """A rollout's extraction ended: ``status`` is ``done``, ``skipped``, ``pending`` (failed,
    retried at the next flush) or ``failed``."""
    span.set_many({"sandmem.memory.outcome": status, **_usage(spent)})
    if error:
        span.fail(_error_type(error), error)


def phase_two_plan(selected: int, diff: SelectionDiff) -> None:
    """The selection sizes, on the current (phase-two) span."""
    tracing.current_span().set_many(
        {
            "sandmem.memory.selected": selected,
            "sandmem.memory.added": len(diff.added),
            "sandmem.memory.retained": len(diff.retained),
            "sandmem.memory.removed": len(diff.removed),
        }
    )


def phase_two_done(span: tracing.Span, report: FlushReport) -> None:
    spent = report.phase_two_usage
    span.set_many(
        {
            "sandmem.memory.outcome": report.phase_two,
            "sandmem.memory.turns": spent.requests,
            **_usage(spent),
        }
    )
    if report.phase_two == "failed":
        span.fail("MemoryGenerationError", report.phase_two_error)


def flush_done(span: tracing.Span, report: FlushReport) -> None:
    """What a flush did, from its report."""
    one, two = report.phase_one_usage, report.phase_two_usage
    span.set_many(
        {
            "sandmem.memory.pending": len(report.pending),
            "sandmem.memory.processed": len(report.processed),
            "sandmem.memory.skipped": len(report.skipped),
            "sandmem.memory.failed": len(report.failed),
            "sandmem.memory.phase_two.outcome": report.phase_two,
            "sandmem.memory.timed_out": report.timed_out,
            "gen_ai.usage.input_tokens": one.input_tokens + two.input_tokens,
            "gen_ai.usage.output_tokens": one.output_tokens + two.output_tokens,
        }
    )
