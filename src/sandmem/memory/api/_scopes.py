"""The memory API of scopes (``docs/scopes.md``):

- ``ingest_routed``: record transcripts of many projects, each into the project memory of its
  working directory (``sandmem memory ingest --route``); the routing is
  ``memory.ingestion._route``, the recording the plain ``ingest`` of each project (its own
  layout: history, redaction, forgetting);
- ``git_setup``: the ``.gitignore`` / ``.gitattributes`` files that keep a project's memory
  in git (``sandmem memory git-setup``; ``memory._git``), and ``merge_memory_text``, the
  merge driver's rule (``sandmem memory merge-driver``);
- ``memory_scopes``: the scopes attached for a directory (``sandmem memory scopes``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from sandmem._errors import UserError
from sandmem.memory import _git
from sandmem.memory.api._ingest import IngestFormat, ingest
from sandmem.memory.api._target import MemoryTarget, target_session
from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.ingestion._detect import FORMATS
from sandmem.memory.ingestion._ingest import expand
from sandmem.memory.ingestion._route import RoutedIngestReport, route_files
from sandmem.memory.layout import MemoryPaths, ensure_layout
from sandmem.memory.scopes import attached_scopes, find_project, load_settings, sandmem_home


async def ingest_routed(
    paths: Iterable[str | os.PathLike[str]],
    *,
    format: IngestFormat = "auto",
    sessions: Sequence[str] | None = None,
    layout: MemoryLayoutConfig | None = None,
    config: MemoryGenerateConfig | None = None,
    generate_now: bool = False,
    markers: Sequence[str] | None = None,
) -> RoutedIngestReport:
    """Record each transcript at ``paths`` into the project memory of its working directory
    (as the transcript records it): the nearest directory up from it with a project marker
    (``markers``, default the user's ``[scopes] project_markers``, else ``.git``), whose
    layout is created there when missing. Transcripts whose directory is not a project, or
    that record none (item lists, session databases), are skipped and reported
    (``report.skipped``); nothing is created outside a project. Each project is ingested as
    by ``ingest`` (``report.projects[path]``), with ``generate_now`` generating it."""
    if format not in ("auto", *FORMATS):
        raise UserError(f"unknown transcript format {format!r}: use auto, {', '.join(FORMATS)}")
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    wanted = tuple(markers) if markers is not None else load_settings().project_markers
    files = await asyncio.to_thread(expand, list(paths))
    routes, skipped = await asyncio.to_thread(
        route_files, files, format=format, markers=wanted, layout=layout
    )
    report = RoutedIngestReport(skipped=skipped)
    for project, found in routes.items():
        report.projects[str(project)] = await ingest(
            project,
            found,
            format=format,
            sessions=sessions,
            layout=layout,
            config=config,
            generate_now=generate_now,
        )
    return report


class GitSetupResult(BaseModel):
    """What ``git_setup`` wrote, and the merge driver git's config needs (a driver cannot be
    committed: ``git config merge.<merge_driver>.driver "<driver_command>"`` in each clone)."""

    written: list[str]
    merge_driver: str = _git.DRIVER
    driver_command: str = _git.DRIVER_COMMAND


async def git_setup(
    target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None
) -> GitSetupResult:
    """Write the layout's git files — ``<memories_dir>/.gitignore`` (the index, locks and
    generation state stay out), ``<memories_dir>/.gitattributes`` (memory files merge with
    the ``sandmem-memory`` driver) and ``<sessions_dir>/.gitignore`` (raw transcripts stay
    out) — creating the layout when missing. The driver itself is set in git's own config
    (``sandmem memory git-setup`` does it)."""
    paths = MemoryPaths.of(layout or MemoryLayoutConfig())
    async with target_session(target, "create it first or pass a live SandboxSession") as (
        session,
        _owned,
    ):
        await ensure_layout(session, paths)
        return GitSetupResult(written=await _git.write_git_files(session, paths))


def merge_memory_text(base: str, ours: str, theirs: str) -> str:
    """The merge of a memory file's three versions (git's base, ours, theirs) by lines: a
    region only one side changed takes that side; a region both changed keeps both, ours
    then the lines of theirs that ours lacks (no conflict markers)."""
    return _git.merge_texts(base, ours, theirs)


class ScopeInfo(BaseModel):
    """One attached scope: its name, kind, mode, directory and whether it holds memory (for
    a scope in a store: its URL, and whether sandmem holds a local copy of it yet)."""

    name: str
    kind: str
    mode: str
    root: str
    memory: bool
    store: str | None = None


class ScopesReport(BaseModel):
    """The scopes attached for a directory, in attachment order (``project`` is ``None``
    when the directory is in no project)."""

    project: str | None
    home: str
    scopes: list[ScopeInfo]


def memory_scopes(directory: str | os.PathLike[str] = ".") -> ScopesReport:
    """The scopes a client working in ``directory`` gets from ``sandmem mcp``: its project
    (the nearest directory up with a marker), the personal scope and the named scopes of the
    user's settings and of the project's ``sandmem.toml``. Raises ``UserError`` for a
    malformed settings file."""
    home = sandmem_home()
    settings = load_settings(home)
    project = find_project(os.path.abspath(directory), settings.project_markers)
    scopes = attached_scopes(project, home=home, settings=settings)
    return ScopesReport(
        project=str(project) if project is not None else None,
        home=str(home),
        scopes=[
            ScopeInfo(
                name=s.name,
                kind=s.kind,
                mode=s.mode,
                root=str(s.root),
                memory=any(
                    os.path.isdir(s.root / d)
                    for d in (s.layout.memories_dir, s.layout.sessions_dir)
                ),
                store=s.store,
            )
            for s in scopes
        ],
    )
