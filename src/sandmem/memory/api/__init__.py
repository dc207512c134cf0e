"""The memory API: owns the public functions over a target (``status``, ``search``,
``generate``, ``forget``, the history and the ingest functions, each with a ``*_sync`` twin)
and the target helper every caller of a layout from outside shares; imports every memory
floor below it (never ``capabilities``, ``distributed`` or anything above).

- ``_target``: opening a target (a live ``SandboxSession`` or a workspace directory) as a
  memory target (``open_target``: its layout must exist; ``target_session``: any
  workspace), the error a held lock becomes (``lock_error``), the ``*_sync`` runner
  (``run_sync``)
- ``_looking``: ``status``, ``list_conversations``, ``reindex``, ``list_files``, ``show``,
  ``search``, ``view_html``
- ``_changing``: ``generate``, and what ``forget``, the ingest functions and the MCP server
  share with it (``config_from_options``, ``generation_manager``, ``generation_report``)
- ``_forget``: ``forget`` (``undo`` too) over ``forget_plan`` (what it removes) and
  ``forget_rollout`` (removing it, then consolidating again)
- ``_history``: ``log``, ``diff``, ``restore``, ``redact_history``, ``inbox``, ``approve``,
  ``dismiss``
- ``_ingest``: ``ingest``, ``ingest_watch``, ``hook_transcripts``
- ``_scopes``: ``ingest_routed`` (each transcript into its own project), ``git_setup`` and
  ``merge_memory_text`` (a project's memory in git), ``memory_scopes`` (what is attached
  where; ``docs/scopes.md``)

Modules outside this folder (``sandmem.memory``, the MCP server, the CLI) import the names
below from ``sandmem.memory.api``, never a private module or name of it
(``tests/test_layering.py`` checks). Every name is imported on first use: looking at memory
imports neither generation nor ingestion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandmem._lazy import lazy_exports

if TYPE_CHECKING:
    from sandmem.memory.api._changing import (
        Engine,
        GenerationProgress,
        config_from_options,
        generate,
        generate_sync,
        generation_manager,
        generation_report,
    )
    from sandmem.memory.api._forget import forget, forget_plan, forget_rollout, forget_sync
    from sandmem.memory.api._history import (
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
    from sandmem.memory.api._ingest import (
        IngestFormat,
        hook_transcripts,
        ingest,
        ingest_sync,
        ingest_watch,
    )
    from sandmem.memory.api._looking import (
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
    from sandmem.memory.api._scopes import (
        GitSetupResult,
        ScopeInfo,
        ScopesReport,
        git_setup,
        ingest_routed,
        memory_scopes,
        merge_memory_text,
    )
    from sandmem.memory.api._target import (
        MemoryTarget,
        lock_error,
        open_target,
        run_sync,
        target_session,
    )

__all__ = [
    "Engine",
    "GenerationProgress",
    "GitSetupResult",
    "HistoryDiff",
    "IngestFormat",
    "MemoryTarget",
    "ProposalInfo",
    "RedactResult",
    "ScopeInfo",
    "ScopesReport",
    "VersionInfo",
    "approve",
    "approve_sync",
    "config_from_options",
    "diff",
    "diff_sync",
    "dismiss",
    "dismiss_sync",
    "forget",
    "forget_plan",
    "forget_rollout",
    "forget_sync",
    "generate",
    "generate_sync",
    "generation_manager",
    "generation_report",
    "git_setup",
    "hook_transcripts",
    "inbox",
    "inbox_sync",
    "ingest",
    "ingest_routed",
    "ingest_sync",
    "ingest_watch",
    "list_conversations",
    "list_conversations_sync",
    "list_files",
    "list_files_sync",
    "lock_error",
    "log",
    "log_sync",
    "memory_scopes",
    "merge_memory_text",
    "open_target",
    "redact_history",
    "redact_history_sync",
    "reindex",
    "reindex_sync",
    "restore",
    "restore_sync",
    "run_sync",
    "search",
    "search_sync",
    "show",
    "show_sync",
    "status",
    "status_sync",
    "target_session",
    "view_html",
    "view_html_sync",
]

#: where each name is defined (imported on first use)
_WHERE = {
    "Engine": "sandmem.memory.api._changing",
    "GitSetupResult": "sandmem.memory.api._scopes",
    "ScopeInfo": "sandmem.memory.api._scopes",
    "ScopesReport": "sandmem.memory.api._scopes",
    "git_setup": "sandmem.memory.api._scopes",
    "ingest_routed": "sandmem.memory.api._scopes",
    "memory_scopes": "sandmem.memory.api._scopes",
    "merge_memory_text": "sandmem.memory.api._scopes",
    "GenerationProgress": "sandmem.memory.api._changing",
    "HistoryDiff": "sandmem.memory.api._history",
    "IngestFormat": "sandmem.memory.api._ingest",
    "MemoryTarget": "sandmem.memory.api._target",
    "ProposalInfo": "sandmem.memory.api._history",
    "RedactResult": "sandmem.memory.api._history",
    "VersionInfo": "sandmem.memory.api._history",
    "approve": "sandmem.memory.api._history",
    "approve_sync": "sandmem.memory.api._history",
    "config_from_options": "sandmem.memory.api._changing",
    "diff": "sandmem.memory.api._history",
    "diff_sync": "sandmem.memory.api._history",
    "dismiss": "sandmem.memory.api._history",
    "dismiss_sync": "sandmem.memory.api._history",
    "forget": "sandmem.memory.api._forget",
    "forget_sync": "sandmem.memory.api._forget",
    "forget_plan": "sandmem.memory.api._forget",
    "forget_rollout": "sandmem.memory.api._forget",
    "generate": "sandmem.memory.api._changing",
    "generate_sync": "sandmem.memory.api._changing",
    "generation_manager": "sandmem.memory.api._changing",
    "generation_report": "sandmem.memory.api._changing",
    "hook_transcripts": "sandmem.memory.api._ingest",
    "inbox": "sandmem.memory.api._history",
    "inbox_sync": "sandmem.memory.api._history",
    "ingest": "sandmem.memory.api._ingest",
    "ingest_sync": "sandmem.memory.api._ingest",
    "ingest_watch": "sandmem.memory.api._ingest",
    "list_conversations": "sandmem.memory.api._looking",
    "list_conversations_sync": "sandmem.memory.api._looking",
    "list_files": "sandmem.memory.api._looking",
    "list_files_sync": "sandmem.memory.api._looking",
    "lock_error": "sandmem.memory.api._target",
    "log": "sandmem.memory.api._history",
    "log_sync": "sandmem.memory.api._history",
    "open_target": "sandmem.memory.api._target",
    "redact_history": "sandmem.memory.api._history",
    "redact_history_sync": "sandmem.memory.api._history",
    "reindex": "sandmem.memory.api._looking",
    "reindex_sync": "sandmem.memory.api._looking",
    "restore": "sandmem.memory.api._history",
    "restore_sync": "sandmem.memory.api._history",
    "run_sync": "sandmem.memory.api._target",
    "search": "sandmem.memory.api._looking",
    "search_sync": "sandmem.memory.api._looking",
    "show": "sandmem.memory.api._looking",
    "show_sync": "sandmem.memory.api._looking",
    "status": "sandmem.memory.api._looking",
    "status_sync": "sandmem.memory.api._looking",
    "target_session": "sandmem.memory.api._target",
    "view_html": "sandmem.memory.api._looking",
    "view_html_sync": "sandmem.memory.api._looking",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
