"""Memory: owns configuration, rollout recording, the two-phase generation pipeline and the
memory API, and imports ``agent``, ``run``, ``sandboxes`` and the floors below (never
``capabilities``, ``distributed`` or anything above).

- ``config``: ``MemoryLayoutConfig``, ``MemoryReadConfig``, ``MemoryGenerateConfig``
- ``rollouts``: rollout ids (``validate_rollout_id``) and the run segment format
- ``layout``: the files of a layout; ``state``: the state files and retry rules
- ``selection``: which raw memories phase two uses, and what it forgets
- ``journal`` / ``history``: memory commits and the versions they make
- ``generation``: the per-(session, layout) manager, phase one, phase two, the stop path
- ``extractive``: the deterministic, model-free engine (``"extractive"``)
- ``store``, ``views``, ``ingestion``, ``mcp``: stores, looking at memory, other agents'
  transcripts, the MCP server

The memory API (``status``, ``list_conversations``, ``list_files``, ``show``, ``search``,
``view_html``, ``generate``, ``forget``, ``ingest``, each with a ``*_sync`` twin) works on a
live sandbox session or a workspace directory; see ``docs/memory-api.md``.

Floors inside memory, lowest first: the core modules at this level (config, layout, rollouts,
state, selection, journal, verify, read_prompt, rendering) and the store seam; ``store``
(sync); ``extractive``; ``generation``; ``views``; ``ingestion`` (other agents'
transcripts); then this package's API. A module imports only from its own floor or below.
"""

from __future__ import annotations

from sandmem.memory._api import (
    GenerationProgress,
    MemoryTarget,
    forget,
    forget_sync,
    generate,
    generate_sync,
    list_conversations,
    list_conversations_sync,
    list_files,
    list_files_sync,
    reindex,
    reindex_sync,
    search,
    search_sync,
    show,
    show_sync,
    status,
    status_sync,
    view_html,
    view_html_sync,
)
from sandmem.memory._history_api import (
    HistoryDiff,
    ProposalInfo,
    RedactResult,
    VersionInfo,
    approve,
    approve_sync,
    diff,
    diff_sync,
    dismiss,
    dismiss_sync,
    inbox,
    inbox_sync,
    log,
    log_sync,
    redact_history,
    redact_history_sync,
    restore,
    restore_sync,
)
from sandmem.memory._ingest_api import (
    IngestFormat,
    hook_transcripts,
    ingest,
    ingest_sync,
    ingest_watch,
)
from sandmem.memory._results import (
    ConsolidationInfo,
    ConversationCounts,
    ConversationInfo,
    ConversationState,
    DirSize,
    FileSize,
    ForgetResult,
    GenerationReport,
    GenerationUsage,
    IndexReport,
    MemoryFile,
    MemoryFileKind,
    MemoryStatus,
    PhaseTokens,
    SearchHit,
    SearchResults,
    TokensPerPhase,
    TokenUsage,
)
from sandmem.memory.config import (
    EXTRACTIVE,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
)
from sandmem.memory.ingestion._report import IngestedSource, IngestReport
from sandmem.memory.mcp import MemoryMCPServer, serve_mcp
from sandmem.memory.rollouts import new_rollout_id, rollout_items, validate_rollout_id
from sandmem.memory.state import classify as failure_kind

__all__ = [
    "EXTRACTIVE",
    "ConsolidationInfo",
    "ConversationCounts",
    "ConversationInfo",
    "ConversationState",
    "DirSize",
    "FileSize",
    "ForgetResult",
    "GenerationProgress",
    "GenerationReport",
    "GenerationUsage",
    "HistoryDiff",
    "IndexReport",
    "IngestFormat",
    "IngestReport",
    "IngestedSource",
    "MemoryFile",
    "MemoryFileKind",
    "MemoryGenerateConfig",
    "MemoryLayoutConfig",
    "MemoryMCPServer",
    "MemoryReadConfig",
    "MemoryStatus",
    "MemoryTarget",
    "PhaseTokens",
    "ProposalInfo",
    "RedactResult",
    "SearchHit",
    "SearchResults",
    "TokenUsage",
    "TokensPerPhase",
    "VersionInfo",
    "approve",
    "approve_sync",
    "diff",
    "diff_sync",
    "dismiss",
    "dismiss_sync",
    "failure_kind",
    "forget",
    "forget_sync",
    "generate",
    "generate_sync",
    "hook_transcripts",
    "inbox",
    "inbox_sync",
    "ingest",
    "ingest_sync",
    "ingest_watch",
    "list_conversations",
    "list_conversations_sync",
    "list_files",
    "list_files_sync",
    "log",
    "log_sync",
    "new_rollout_id",
    "redact_history",
    "redact_history_sync",
    "reindex",
    "reindex_sync",
    "restore",
    "restore_sync",
    "rollout_items",
    "search",
    "search_sync",
    "serve_mcp",
    "show",
    "show_sync",
    "status",
    "status_sync",
    "validate_rollout_id",
    "view_html",
    "view_html_sync",
]
