"""What keeps a weak consolidation from reaching memory, and what memory gets instead.

- ``brief_lines`` / ``strip_brief``: a model that copies its brief's bookkeeping (the
  selection lines, the rules, the input headers) into ``MEMORY.md`` or ``memory_summary.md``
  has those lines removed before the result is checked (an answer left empty by it fails, and
  the fallback below takes over). The inputs' own text (raw memories, the current files) is
  not part of this: carrying it into memory is the consolidation's job.
- ``needs_fallback``: when the model's consolidation failed, or was incomplete (it left out a
  conversation it was given), the extractive engine consolidates what phase one produced
  instead, so the next run never starts without memory; ``FALLBACK_NOTE`` marks the summary
  it writes. The model is asked again at the next flush.
"""

from __future__ import annotations

import re

from sandmem.memory.config import EXTRACTIVE, MemoryGenerateConfig
from sandmem.memory.verify import Verification

#: the first line of a summary the extractive engine wrote because the model's failed
FALLBACK_NOTE = (
    "_Consolidated without a model (sandmem's extractive engine): the model's consolidation "
    "failed; it is tried again at the next memory generation._"
)

_BULLET = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
#: a line shorter than this (in words) is not taken for a copied brief line
_MIN_WORDS = 4


def _key(line: str) -> str:
    text = _BULLET.sub("", line.strip().strip("`"))
    return " ".join(text.lower().split()).rstrip(".:;,")


def brief_lines(brief: str) -> frozenset[str]:
    """The lines of ``brief`` (the consolidation's instructions rendered without the inputs'
    text, and its follow-up turn) that could be taken for memory: normalised, four words or
    more."""
    keys = {_key(line) for line in brief.splitlines()}
    return frozenset(k for k in keys if len(k.split()) >= _MIN_WORDS)


def strip_brief(text: str, lines: frozenset[str]) -> tuple[str, int]:
    """``text`` without the lines that copy the brief, and how many were removed."""
    kept: list[str] = []
    removed = 0
    for line in text.splitlines(keepends=True):
        if _key(line) in lines:
            removed += 1
        else:
            kept.append(line)
    return "".join(kept), removed


def needs_fallback(config: MemoryGenerateConfig, checked: Verification | None) -> bool:
    """Whether the extractive engine should consolidate instead: the model's consolidation
    failed (``checked`` is ``None``) or left out a conversation it was given. Never for the
    extractive engine itself, never in review mode (nothing changes memory there until a
    person approves it), and not when ``MemoryGenerateConfig.phase_two_fallback`` is off."""
    if config.phase_two_model == EXTRACTIVE or config.review or not config.phase_two_fallback:
        return False
    return checked is None or bool(checked.missing)


def mark_summary(summary: str) -> str:
    """The extractive fallback's summary, marked as such on its first line."""
    return f"{FALLBACK_NOTE}\n\n{summary.lstrip()}"
