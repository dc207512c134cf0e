"""The results of the memory API (``sandmem.memory.status``, ``search``, ...): pydantic models
whose JSON is what the ``sandmem memory`` commands print with ``--json``.

Every field is documented in its attribute docstring, which also becomes its description in
the models' JSON schema (``MemoryStatus.model_json_schema()``). The docstrings are read when a
schema is first asked for, not at import (pydantic's ``use_attribute_docstrings`` parses this
module's source once per class: a fifth of a memory command's import time).
"""

from __future__ import annotations

import ast
import inspect
import sys
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from sandmem._usage import Usage

ConversationState = Literal["done", "pending", "failed", "skipped"]
MemoryFileKind = Literal["summary", "memory", "rollout_summary", "raw_memory", "rollout"]


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    _described: ClassVar[bool] = False

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The JSON schema, each field described by its attribute docstring."""
        _describe_fields()
        return super().model_json_schema(*args, **kwargs)


def _describe_fields() -> None:
    """Set every result field's description from its attribute docstring (once), then
    rebuild the models, nested ones first (they are defined first)."""
    if _Result._described:
        return
    module = sys.modules[__name__]
    tree = ast.parse(inspect.getsource(module))
    models = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        model = getattr(module, node.name, None)
        if not (isinstance(model, type) and issubclass(model, _Result)) or model is _Result:
            continue
        models.append(model)
        for field, doc in zip(node.body, node.body[1:], strict=False):
            if not (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)):
                continue
            if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)):
                continue
            info = model.model_fields.get(field.target.id)
            if info is not None and isinstance(doc.value.value, str) and info.description is None:
                info.description = inspect.cleandoc(doc.value.value)
    for model in models:
        model.model_rebuild(force=True)
    _Result._described = True


# ---------------------------------------------------------------- conversations and status


class ConversationInfo(_Result):
    """One recorded conversation (a rollout file ``<sessions_dir>/<rollout_id>.jsonl``) and
    the state of its memory."""

    rollout_id: str
    """The conversation's id (its rollout file's name)."""
    status: ConversationState
    """``done``: its raw memory is up to date. ``pending``: the next generation extracts it.
    ``failed``: extraction failed ``max_attempts`` times; retried only by
    ``generate(retry_failed=True)`` or when the conversation continues. ``skipped``: nothing
    worth remembering."""
    attempts: int
    """Failed extraction attempts of this version of the conversation (0 after a success or a
    new segment)."""
    failure_kind: str | None
    """The failure class of the last failed attempt, when the generation state records it
    (``environment``: the model server or network, retried with backoff without using an
    attempt; ``rollout``: this conversation's extraction itself failed)."""
    next_retry_at: str | None
    """When the next extraction attempt is due (ISO-8601 UTC), when the generation state
    records it; ``None`` also means "at the next generation" for a pending conversation."""
    last_error: str | None
    """The last extraction error (redacted), ``None`` when the last attempt succeeded."""
    last_attempt_at: str | None
    """When extraction was last attempted (ISO-8601 UTC)."""
    segments: int
    """Run segments recorded (one per ``Runner.run``)."""
    started_at: str | None
    """``updated_at`` of the first segment."""
    updated_at: str
    """``updated_at`` of the last segment (``"unknown"`` when it has none)."""
    terminal_state: str
    """How the last run ended (``completed``, ``failed``, ``max_turns_exceeded``, ...)."""
    task: str | None
    """The first user message of the conversation, on one line, cut to 120 characters."""
    summary_file: str | None
    """Its rollout summary (workspace-relative), when one exists."""
    raw_memory_file: str | None
    """Its raw memory (workspace-relative), when one exists."""


class ConversationCounts(_Result):
    """How many conversations are in each state."""

    total: int
    """All recorded conversations."""
    done: int
    """Conversations whose raw memory is up to date."""
    pending: int
    """Conversations the next generation extracts."""
    failed: int
    """Conversations that failed ``max_attempts`` times."""
    skipped: int
    """Conversations with nothing worth remembering."""


class ConsolidationInfo(_Result):
    """The last consolidation (phase two) of the layout."""

    time: str | None
    """When it ran (ISO-8601 UTC)."""
    status: str | None
    """``done``, ``incomplete`` (committed, but some conversations were left out: see
    ``missing``), ``fallback`` (the model's consolidation did not succeed and the extractive
    engine's was committed; ``error`` is the model's) or ``failed`` (or another outcome the
    generation log records)."""
    error: str | None
    """Its error when it failed (redacted)."""
    failure_kind: str | None = None
    """``environment`` or ``rollout`` when it failed (see ``memory.state.classify``)."""
    missing: list[str] = []
    """For ``incomplete``: the conversations it did not fold in (or still cites although
    removed); the next generation consolidates them again."""
    rollouts: int
    """How many conversations it was given."""
    duration_s: float | None
    """How long it took, in seconds."""
    last_success_at: str | None
    """When a consolidation last succeeded."""
    selected: int | None
    """How many raw memories the last successful one used (``phase_two_selection.json``)."""


class FileSize(_Result):
    """A memory file and its size."""

    path: str
    """Workspace-relative path."""
    bytes: int | None
    """Size in bytes; ``None`` when the file does not exist."""


class DirSize(_Result):
    """A memory directory: how many visible files it holds, and their total size."""

    path: str
    """Workspace-relative path."""
    files: int
    """Visible files (hidden ones such as locks are not counted), recursively."""
    bytes: int
    """Their total size in bytes."""


class PhaseTokens(_Result):
    """What one phase has cost, summed over ``generation_log.jsonl``."""

    runs: int
    """Phase runs (phase one: one per conversation extracted; phase two: one per
    consolidation)."""
    failed_runs: int
    """Runs that failed."""
    requests: int
    """Model requests (0 for runs logged before requests were recorded)."""
    input_tokens: int
    """Input tokens spent."""
    output_tokens: int
    """Output tokens spent."""


class TokensPerPhase(_Result):
    """Tokens spent per phase."""

    phase_one: PhaseTokens
    """Extraction."""
    phase_two: PhaseTokens
    """Consolidation."""


class SearchInfo(_Result):
    """How ``search`` ranks in this process, and how much of the layout has vectors (as the
    index held it after the last search or ``reindex``)."""

    ranking: Literal["bm25", "hybrid"]
    """``"hybrid"``: BM25 fused with an embedding model (the ``semantic`` extra); ``"bm25"``:
    words only."""
    model: str | None = None
    """The embedding model (hybrid)."""
    reason: str | None = None
    """Why BM25: the extra is not installed, or ``SANDMEM_SEARCH=bm25``."""
    embeddable: int = 0
    """Indexed rows that get a vector: distilled-memory sections and transcript passages of
    the embedded kinds."""
    embedded: int = 0
    """How many of them have one (the rest get one at the next searches, or ``reindex``)."""
    vectors: int = 0
    """Distinct vectors stored (a text held twice is embedded once)."""
    model_of_vectors: str | None = None
    """The model the stored vectors were made with (``None``: no vectors)."""


class MemoryStatus(_Result):
    """Everything ``status()`` reports about one layout of one workspace."""

    workspace: str
    """The workspace root (absolute)."""
    memories_dir: str
    """The layout's memory directory, relative to the workspace."""
    sessions_dir: str
    """The layout's rollout directory, relative to the workspace."""
    counts: ConversationCounts
    """Conversations per state."""
    conversations: list[ConversationInfo]
    """The conversations that need attention: the pending and failed ones, most recently
    updated first (``list_conversations`` pages through all of them)."""
    last_consolidation: ConsolidationInfo | None
    """The last consolidation, ``None`` when none ever ran."""
    files: dict[str, FileSize]
    """``MEMORY.md``, ``memory_summary.md`` and ``raw_memories.md`` by name."""
    dirs: dict[str, DirSize]
    """``raw_memories``, ``rollout_summaries``, ``skills`` and ``sessions`` by name."""
    tokens: TokensPerPhase
    """Tokens spent per phase."""
    search: SearchInfo | None = None
    """How search ranks (BM25 or hybrid) and how much has vectors."""

    @property
    def pending(self) -> list[ConversationInfo]:
        """The conversations the next generation extracts."""
        return [c for c in self.conversations if c.status == "pending"]

    @property
    def failed(self) -> list[ConversationInfo]:
        """The conversations that failed ``max_attempts`` times."""
        return [c for c in self.conversations if c.status == "failed"]


# ---------------------------------------------------------------- files and search


class MemoryFile(_Result):
    """One memory file as ``show()`` found it."""

    kind: MemoryFileKind
    """``summary`` (``memory_summary.md``), ``memory`` (``MEMORY.md``), or one conversation's
    ``rollout_summary``, ``raw_memory`` or ``rollout`` (its recorded run segments, JSONL)."""
    rollout_id: str | None
    """The conversation, for ``rollout_summary`` and ``raw_memory``."""
    path: str | None
    """Workspace-relative path; ``None`` for a rollout summary not written yet (its name is
    chosen when the conversation is extracted)."""
    exists: bool
    """Whether the file exists."""
    empty: bool
    """Whether it exists but holds nothing but whitespace (no memory generated yet)."""
    text: str
    """Its content (``""`` when missing)."""


class SearchHit(_Result):
    """One ranked hit: a section of a distilled memory file (``tier="memory"``) or a passage
    of a recorded conversation (``tier="transcript"``)."""

    path: str
    """The file, workspace-relative: a memory file, or the conversation's rollout file
    (``<sessions_dir>/<rollout_id>.jsonl``) for a transcript hit."""
    line: int
    """1-based line of the section's best-matching line; for a transcript hit, the segment's
    line in the rollout file (``segment``)."""
    score: float
    """BM25 relevance within the hit's tier, higher is better; only the order between hits of
    one search means anything."""
    snippet: str
    """That line (for a transcript hit, the passage's best-matching line), whitespace
    collapsed, cut to 160 characters."""
    heading: str | None
    """The headings down to the section (``"Memory > Invoice totals"``); ``None`` for text
    before the first heading; for a transcript hit, what the passage is (``user``,
    ``assistant``, ``tool call``, ``tool output``, ``final output``)."""
    tier: Literal["memory", "transcript"] = "memory"
    """Where the hit comes from: distilled memory, or the recorded conversations."""
    rollout_id: str | None = None
    """A transcript hit's conversation (``sandmem memory show ID --what rollout`` prints it)."""
    segment: int | None = None
    """A transcript hit's segment: its 1-based line in the rollout file."""
    summary_file: str | None = None
    """A transcript hit's rollout summary, when one exists (workspace-relative)."""
    text: str | None = None
    """A transcript hit's whole passage (redacted, at most 600 characters)."""


class SearchResults(_Result):
    """The hits of one search, best first."""

    query: str
    """The query as given."""
    hits: list[SearchHit]
    """Best first, at most ``limit``."""
    ranking: Literal["bm25", "hybrid"] = "bm25"
    """How the hits were ranked: ``"bm25"`` (words), or ``"hybrid"`` (BM25 fused with the
    embedding model of the ``semantic`` extra; each hit's ``score`` is then its fused score)."""


# ---------------------------------------------------------------- generating and forgetting


class TokenUsage(_Result):
    """Model requests and tokens of one phase of one generation."""

    requests: int
    """Model requests."""
    input_tokens: int
    """Input tokens."""
    output_tokens: int
    """Output tokens."""

    @classmethod
    def of(cls, usage: Usage) -> TokenUsage:
        return cls(
            requests=usage.requests,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
        )


class GenerationUsage(_Result):
    """Usage of one generation per phase."""

    phase_one: TokenUsage
    """Extraction."""
    phase_two: TokenUsage
    """Consolidation."""


class GenerationReport(_Result):
    """What one generation (a flush: phase one for every pending conversation, then phase
    two) did."""

    processed: list[str]
    """Conversations extracted."""
    skipped: list[str]
    """Conversations with nothing worth remembering."""
    failed: dict[str, str]
    """Conversations whose extraction failed, with the error; they stay pending."""
    failure_kinds: dict[str, str] = {}
    """For each failed conversation: ``environment`` (server down or slow: no attempt used,
    retried later) or ``rollout`` (counts toward ``max_attempts``)."""
    not_reached: list[str]
    """Pending conversations it did not get to (it timed out)."""
    deferred: list[str] = []
    """Pending conversations left for later: their retry time after an environment failure
    has not come and the server did not answer this generation."""
    phase_two: str
    """The consolidation: ``done``, ``incomplete`` (what was written is kept; see
    ``phase_two_missing``), ``fallback`` (the model's consolidation failed or was
    incomplete, and the extractive engine's was committed instead; the model is tried again
    at the next generation), ``skipped`` (nothing new), ``failed`` (the previous memory is
    kept), or ``not_run``."""
    phase_two_error: str | None
    """The consolidation's error when it failed, or what an incomplete one left out."""
    phase_two_failure_kind: str | None = None
    """``environment`` or ``rollout`` when the consolidation failed."""
    phase_two_missing: list[str] = []
    """The conversations an incomplete consolidation left out (pending for the next one)."""
    problems: dict[str, str] = {}
    """Bad input left out (an unreadable rollout or raw memory, a corrupt state or selection
    file): path → reason. Everything else was processed."""
    timed_out: bool
    """Whether it stopped at ``flush_timeout_s``."""
    usage: GenerationUsage
    """Model usage per phase."""
    complete: bool
    """Whether everything succeeded: no conversation failed, the consolidation did not fail
    (in review mode, a consolidation waiting in the inbox as a proposal counts as done), and
    it did not time out."""


class ForgetResult(_Result):
    """What ``forget()`` removed (or, with ``dry_run``, would remove)."""

    rollout_id: str
    """The forgotten conversation."""
    dry_run: bool
    """``True``: nothing was changed; the fields say what would be."""
    removed: list[str]
    """Its files: rollout summaries, raw memory, rollout file (workspace-relative)."""
    state_entry: bool
    """Whether its entry in ``generation_state.json`` was (would be) removed."""
    clears_memory: bool
    """Whether it was the last conversation in memory, so ``MEMORY.md`` and
    ``memory_summary.md`` were (would be) emptied rather than re-consolidated."""
    report: GenerationReport | None
    """The re-consolidation that followed (``None`` for a dry run)."""
    undone: bool = False
    """With ``undo=True``: whether a note of the conversation was taken away (``False``: it
    was not forgotten)."""


class IndexReport(_Result):
    """What ``reindex`` built: the layout index file and what it holds."""

    path: str
    """Workspace-relative path of the index (``<memories_dir>/.index.sqlite``)."""
    conversations: int
    """Conversations indexed."""
    files: int
    """Searchable files indexed (``MEMORY.md``, rollout summaries, skills)."""
    sections: int
    """Search sections (a file is split at its headings)."""
    bytes: int
    """Size of the index file."""
