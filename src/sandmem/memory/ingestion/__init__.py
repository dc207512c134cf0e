"""Owns ingesting transcripts written by other agents (Codex CLI, Claude Code, the OpenAI
Agents SDK, plain Responses items or Chat Completions messages) as memory conversations, and
imports memory's core, ``memory.generation`` and the floors below (never ``memory.views``, the
memory API, ``capabilities`` or anything above).

Reading those files (``_lines``, ``_sqlite``), the pure parsers that turn them into canonical
items (``_codex``, ``_claude``, ``_items``), telling formats apart (``_detect``), cutting a
conversation into run segments (``_segments``, in the format of ``memory.rollouts``), and
recording only what is new through the generation manager's ``record`` (``_ingest``), plus
the agents' hooks and the directory watcher.
"""
