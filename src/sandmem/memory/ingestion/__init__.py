"""Ingesting transcripts written by other agents (Codex CLI, Claude Code, the OpenAI Agents
SDK, plain Responses items or Chat Completions messages) as memory conversations.

Owns: reading those files (``_lines``, ``_sqlite``), the pure parsers that turn them into
canonical items (``_codex``, ``_claude``, ``_items``), telling formats apart (``_detect``),
cutting a conversation into run segments (``_segments``), and recording only what is new
through the generation manager's ``record`` (``_ingest``), plus the agents' hooks and the
directory watcher. It imports the memory core and ``memory.generation``; it never imports
``memory.views``, the memory API, ``capabilities`` or anything above.
"""
