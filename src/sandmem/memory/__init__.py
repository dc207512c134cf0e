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

from typing import TYPE_CHECKING

from sandmem._lazy import lazy_exports

if TYPE_CHECKING:
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

#: where each name is defined (imported on first use: ``sandmem memory status`` imports
#: neither generation nor ingestion)
_WHERE = {
    "ConsolidationInfo": "sandmem.memory._results",
    "ConversationCounts": "sandmem.memory._results",
    "ConversationInfo": "sandmem.memory._results",
    "ConversationState": "sandmem.memory._results",
    "DirSize": "sandmem.memory._results",
    "EXTRACTIVE": "sandmem.memory.config",
    "FileSize": "sandmem.memory._results",
    "ForgetResult": "sandmem.memory._results",
    "GenerationProgress": "sandmem.memory._api",
    "GenerationReport": "sandmem.memory._results",
    "GenerationUsage": "sandmem.memory._results",
    "HistoryDiff": "sandmem.memory._history_api",
    "IndexReport": "sandmem.memory._results",
    "IngestFormat": "sandmem.memory._ingest_api",
    "IngestReport": "sandmem.memory.ingestion._report",
    "IngestedSource": "sandmem.memory.ingestion._report",
    "MemoryFile": "sandmem.memory._results",
    "MemoryFileKind": "sandmem.memory._results",
    "MemoryGenerateConfig": "sandmem.memory.config",
    "MemoryLayoutConfig": "sandmem.memory.config",
    "MemoryMCPServer": "sandmem.memory.mcp",
    "MemoryReadConfig": "sandmem.memory.config",
    "MemoryStatus": "sandmem.memory._results",
    "MemoryTarget": "sandmem.memory._api",
    "PhaseTokens": "sandmem.memory._results",
    "ProposalInfo": "sandmem.memory._history_api",
    "RedactResult": "sandmem.memory._history_api",
    "SearchHit": "sandmem.memory._results",
    "SearchResults": "sandmem.memory._results",
    "TokenUsage": "sandmem.memory._results",
    "TokensPerPhase": "sandmem.memory._results",
    "VersionInfo": "sandmem.memory._history_api",
    "approve": "sandmem.memory._history_api",
    "approve_sync": "sandmem.memory._history_api",
    "diff": "sandmem.memory._history_api",
    "diff_sync": "sandmem.memory._history_api",
    "dismiss": "sandmem.memory._history_api",
    "dismiss_sync": "sandmem.memory._history_api",
    "failure_kind": "sandmem.memory.state:classify",
    "forget": "sandmem.memory._api",
    "forget_sync": "sandmem.memory._api",
    "generate": "sandmem.memory._api",
    "generate_sync": "sandmem.memory._api",
    "hook_transcripts": "sandmem.memory._ingest_api",
    "inbox": "sandmem.memory._history_api",
    "inbox_sync": "sandmem.memory._history_api",
    "ingest": "sandmem.memory._ingest_api",
    "ingest_sync": "sandmem.memory._ingest_api",
    "ingest_watch": "sandmem.memory._ingest_api",
    "list_conversations": "sandmem.memory._api",
    "list_conversations_sync": "sandmem.memory._api",
    "list_files": "sandmem.memory._api",
    "list_files_sync": "sandmem.memory._api",
    "log": "sandmem.memory._history_api",
    "log_sync": "sandmem.memory._history_api",
    "new_rollout_id": "sandmem.memory.rollouts",
    "redact_history": "sandmem.memory._history_api",
    "redact_history_sync": "sandmem.memory._history_api",
    "reindex": "sandmem.memory._api",
    "reindex_sync": "sandmem.memory._api",
    "restore": "sandmem.memory._history_api",
    "restore_sync": "sandmem.memory._history_api",
    "rollout_items": "sandmem.memory.rollouts",
    "search": "sandmem.memory._api",
    "search_sync": "sandmem.memory._api",
    "serve_mcp": "sandmem.memory.mcp",
    "show": "sandmem.memory._api",
    "show_sync": "sandmem.memory._api",
    "status": "sandmem.memory._api",
    "status_sync": "sandmem.memory._api",
    "validate_rollout_id": "sandmem.memory.rollouts",
    "view_html": "sandmem.memory._api",
    "view_html_sync": "sandmem.memory._api",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
