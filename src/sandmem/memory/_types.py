"""Data passed between the memory pipeline and its engines (model-based or extractive)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from sandmem.memory.selection import RawMemoryRef


class PhaseOneArtifacts(BaseModel):
    """Phase one's structured output for one rollout. All three empty = nothing to remember."""

    model_config = ConfigDict(extra="forbid")

    rollout_slug: str = Field(description="short task name: a-z 0-9 _ - , at most 80 characters")
    rollout_summary: str = Field(description="Markdown recap of the conversation with evidence")
    raw_memory: str = Field(description="compact Markdown bullets of durable learnings")


@dataclass(frozen=True)
class SelectedMemory:
    """One selected raw memory with its text and its rollout summary's text."""

    ref: RawMemoryRef
    raw_memory: str
    rollout_summary: str


@dataclass(frozen=True)
class ConsolidationInputs:
    """Everything phase two works from. ``memories_dir`` is workspace-relative."""

    memories_dir: str
    selected: list[SelectedMemory]
    added: list[RawMemoryRef]
    retained: list[RawMemoryRef]
    removed: list[RawMemoryRef]
    current_memory_md: str
    #: MEMORY.md as the last consolidation wrote it ("" when there was none)
    consolidated_memory_md: str
    memory_md_max_bytes: int
    summary_max_bytes: int
    extra_prompt: str | None = None
    #: the current memory_summary.md, and raw_memories.md as this consolidation wrote it
    current_summary_md: str = ""
    raw_memories_md: str = ""


@dataclass(frozen=True)
class ConsolidationOutput:
    """What a model-free engine returns; the pipeline writes it atomically."""

    memory_md: str
    memory_summary_md: str
    #: extra files relative to ``memories_dir/skills`` (e.g. ``"run-tests/SKILL.md"``)
    skills: dict[str, str] = field(default_factory=dict)
