"""``ingest``: record transcripts of other agents (Codex CLI, Claude Code, the OpenAI Agents
SDK, plain Responses items or chat messages) as memory conversations of a layout.

Part of the public memory API (``sandmem.memory.ingestion``); the work is done by
``sandmem.memory.ingestion`` (parsers and the incremental recorder).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal

from sandmem._errors import SandboxError, UserError
from sandmem.memory import journal
from sandmem.memory.api._changing import (
    Engine,
    config_from_options,
    generate,
    generation_manager,
)
from sandmem.memory.api._target import MemoryTarget, lock_error, run_sync, target_session
from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.history import Attribution
from sandmem.memory.ingestion._detect import FORMATS
from sandmem.memory.ingestion._hooks import claude_hook_paths, codex_notify_paths
from sandmem.memory.ingestion._ingest import MAX_INGEST_BYTES, MAX_TITLE_CHARS, Ingestor
from sandmem.memory.ingestion._report import IngestReport
from sandmem.memory.ingestion._watch import watch
from sandmem.memory.layout import MemoryPaths
from sandmem.models._base import Model
from sandmem.sandboxes._session import SandboxSession

IngestFormat = Literal["auto", "codex", "claude-code", "openai-agents", "responses", "chat"]


def _workspace(
    target: MemoryTarget,
) -> contextlib.AbstractAsyncContextManager[tuple[SandboxSession, bool]]:
    """The session of a target (a workspace need not hold a memory layout yet: ingest
    creates one) and whether it is ours."""
    return target_session(target, "create it first or pass a live SandboxSession")


async def ingest(
    target: MemoryTarget,
    paths: Iterable[str | os.PathLike[str]],
    *,
    format: IngestFormat = "auto",
    sessions: Sequence[str] | None = None,
    layout: MemoryLayoutConfig | None = None,
    config: MemoryGenerateConfig | None = None,
    engine: Engine | None = None,
    model: str | Model | None = None,
    generate_now: bool = False,
    max_bytes: int = MAX_INGEST_BYTES,
    max_title_chars: int = MAX_TITLE_CHARS,
    cwd: str | os.PathLike[str] | None = None,
) -> IngestReport:
    """Record the transcripts at ``paths`` (files, or directories searched for ``*.jsonl``,
    ``*.json`` and SQLite files) as conversations of the layout: one conversation per source
    session, its rollout id derived from the source's session id (``codex-<id>``,
    ``claude-<id>``, ``agents-<id>``, ...). Only what was appended since the last ingest is
    recorded; a last line still being written waits for the next ingest. Every segment is
    redacted before it is written. ``format`` is one of ``auto`` (told from the content),
    ``codex``, ``claude-code``, ``openai-agents`` (a ``SQLiteSession`` database or a JSON
    list of items), ``responses``, ``chat``; ``sessions`` limits a database (or any source) to
    those session ids; ``cwd`` to the sessions whose working directory (as the transcript
    records it) is that directory or inside it, the others are skipped ("another project").
    ``max_bytes`` bounds what one ingest records per source session (the rest waits for the
    next ingest); ``max_title_chars`` bounds a source's title, which every segment of its
    session carries.

    The conversations are pending: the next flush, ``sandmem memory generate`` or a worker
    generates their memory; ``generate_now=True`` does it at once, with the engine chosen as
    for ``generate`` (``report.generation``). A file that cannot be read or placed is
    reported (``report.sources[i].status`` and ``error``) and never stops the others.
    Raises ``MemoryLockedError`` when another process holds the layout's lock.
    """
    if format not in ("auto", *FORMATS):
        raise UserError(f"unknown transcript format {format!r}: use auto, {', '.join(FORMATS)}")
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    paths = list(paths)
    if layout is not None and not isinstance(layout, MemoryLayoutConfig):
        raise UserError(f"layout must be a MemoryLayoutConfig, got {type(layout).__name__}")
    if max_bytes <= 0:
        raise UserError("max_bytes must be positive")
    if max_title_chars <= 0:
        raise UserError("max_title_chars must be positive")
    cfg = config_from_options(config, engine, model)
    mpaths = MemoryPaths.of(layout or MemoryLayoutConfig())
    async with _workspace(target) as (session, owned):
        manager = generation_manager(session, mpaths, cfg, owned)
        ingestor = Ingestor(
            manager.recorder,
            format=format,
            sessions=sessions,
            max_bytes=max_bytes,
            max_title_chars=max_title_chars,
            cwd=cwd,
        )
        try:
            report = await ingestor.run(paths)
        except SandboxError as exc:
            raise lock_error(exc) from exc
        if generate_now:  # the consolidation's version says it came from an ingest
            with journal.attributed(Attribution("ingest", client="ingest")):
                report.generation = await generate(session, layout=layout, config=cfg)
    return report


def ingest_sync(
    target: MemoryTarget,
    paths: Iterable[str | os.PathLike[str]],
    *,
    format: IngestFormat = "auto",
    sessions: Sequence[str] | None = None,
    layout: MemoryLayoutConfig | None = None,
    config: MemoryGenerateConfig | None = None,
    engine: Engine | None = None,
    model: str | Model | None = None,
    generate_now: bool = False,
    max_bytes: int = MAX_INGEST_BYTES,
    max_title_chars: int = MAX_TITLE_CHARS,
    cwd: str | os.PathLike[str] | None = None,
) -> IngestReport:
    """``ingest``, blocking."""
    return run_sync(
        ingest(
            target,
            paths,
            format=format,
            sessions=sessions,
            layout=layout,
            config=config,
            engine=engine,
            model=model,
            generate_now=generate_now,
            max_bytes=max_bytes,
            max_title_chars=max_title_chars,
            cwd=cwd,
        )
    )


def hook_transcripts(agent: Literal["claude-code", "codex"], payload: str) -> list[Path]:
    """The transcript files an agent's hook names: Claude Code's ``SessionEnd`` hook input
    (the JSON on its stdin, ``transcript_path``) or Codex's ``notify`` payload (its last
    argument; the thread's rollout file under ``$CODEX_HOME/sessions``, none for other
    notifications). Raises ``UserError`` for a payload that names none."""
    try:
        if agent == "claude-code":
            return claude_hook_paths(payload)
        if agent == "codex":
            return codex_notify_paths(payload)
    except (ValueError, OSError) as exc:
        raise UserError(f"{agent} hook: {exc}") from None
    raise UserError(f"hooks are for 'claude-code' or 'codex', not {agent!r}")


async def ingest_watch(
    target: str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    format: IngestFormat = "auto",
    layout: MemoryLayoutConfig | None = None,
    config: MemoryGenerateConfig | None = None,
    interval: float = 2.0,
    stop: asyncio.Event | None = None,
    on_report: Callable[[IngestReport], None] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> None:
    """Ingest the transcripts under ``directory`` as they change, until ``stop`` is set: a
    file is ingested once it has stayed the same for one look (every ``interval`` seconds)
    after a change. Restarting it records nothing twice (each ingest records only what is
    new). ``on_report`` gets the report of every ingest that recorded or failed something;
    ``cwd`` keeps only the sessions of that working directory, as for ``ingest``."""
    if interval <= 0:
        raise UserError("interval must be positive")

    async def once(files: list[Path]) -> None:
        report = await ingest(target, files, format=format, layout=layout, config=config, cwd=cwd)
        if on_report is not None and (report.recorded_segments or report.failed):
            on_report(report)

    await watch(Path(directory), once, interval=interval, stop=stop)
