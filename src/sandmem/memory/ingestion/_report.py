"""What an ingest did, per source and in all."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from sandmem.memory._results import GenerationReport

SourceStatus = Literal["recorded", "unchanged", "skipped", "failed"]


class IngestedSource(BaseModel):
    """One source session (or a file that could not be read): what was recorded from it."""

    path: str
    format: str | None = None
    session_id: str | None = None
    rollout_id: str | None = None
    status: SourceStatus
    #: run segments (user turns) appended to the conversation by this ingest
    segments: int = 0
    items: int = 0
    #: what had no counterpart, or could not be read, by kind (``reasoning``, ``thinking``,
    #: ``malformed_line``, ``event:token_count``, ...)
    dropped: dict[str, int] = Field(default_factory=dict)
    #: bytes of an unfinished last line, left for the next ingest
    pending_bytes: int = 0
    #: the per-ingest budget was reached: the rest is recorded by the next ingest
    more: bool = False
    error: str | None = None


class IngestReport(BaseModel):
    """Every source an ingest looked at, in order."""

    sources: list[IngestedSource] = Field(default_factory=list)
    #: the generation run after the ingest (``generate=True``), else ``None``: the
    #: conversations are pending until the next flush, ``sandmem memory generate`` or a worker
    generation: GenerationReport | None = None

    @property
    def recorded_segments(self) -> int:
        return sum(s.segments for s in self.sources)

    @property
    def rollout_ids(self) -> list[str]:
        return sorted({s.rollout_id for s in self.sources if s.rollout_id and s.segments})

    @property
    def failed(self) -> list[IngestedSource]:
        return [s for s in self.sources if s.status in ("failed", "skipped")]
