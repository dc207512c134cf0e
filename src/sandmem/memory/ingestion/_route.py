"""Routing transcripts by project (``sandmem memory ingest --route``): each transcript goes to
the project memory of its working directory, as the transcript records it.

The working directory is the one the ``--cwd`` filter of an ingest reads (``SourceMeta.cwd``,
set by the Codex and Claude Code parsers while they read the file): the router reads it the
same way, then asks ``scopes.find_project`` for the project around it. A transcript with no
recorded working directory (the item-list formats, a session database), or whose directory is
not a project (no marker, gone from this machine, ``/`` or the home directory), is skipped
and reported; nothing is created outside a recognised project.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from sandmem.memory.config import MemoryLayoutConfig
from sandmem.memory.ingestion import _detect
from sandmem.memory.ingestion._ingest import _parser
from sandmem.memory.ingestion._lines import LineReader
from sandmem.memory.ingestion._model import SourceMeta
from sandmem.memory.ingestion._open import open_regular
from sandmem.memory.ingestion._report import IngestedSource, IngestReport
from sandmem.memory.scopes import find_project

#: the formats whose transcripts record a working directory
ROUTABLE = ("codex", "claude-code")
#: the start of the reason a transcript routed nowhere is skipped
NOT_ROUTED = "not routed"


class RoutedIngestReport(BaseModel):
    """What ``ingest --route`` did: one ingest report per project, and the transcripts it
    sent nowhere (``status="skipped"``, ``error`` says why)."""

    projects: dict[str, IngestReport] = Field(default_factory=dict)
    skipped: list[IngestedSource] = Field(default_factory=list)

    @property
    def recorded_segments(self) -> int:
        return sum(r.recorded_segments for r in self.projects.values())

    @property
    def failed(self) -> list[IngestedSource]:
        return [s for r in self.projects.values() for s in r.sources if s.status == "failed"]


def source_cwd(path: Path, fmt: str) -> str | None:
    """The working directory a Codex or Claude Code transcript records (the one the
    ingest's ``cwd`` filter judges), or ``None``."""
    meta = SourceMeta(fmt)
    with open_regular(path) as handle:
        reader = LineReader(handle, meta)
        for _event in _parser(fmt)(reader, meta):
            pass
    return meta.cwd


def _format(path: Path, given: str) -> str | None:
    if given != "auto":
        return given
    return _detect.detect(path).format


def route_files(
    files: Sequence[Path],
    *,
    format: str = "auto",
    markers: Sequence[str],
    layout: MemoryLayoutConfig | None = None,
) -> tuple[dict[Path, list[Path]], list[IngestedSource]]:
    """The project of each file (files grouped by project, in order), and the files routed
    nowhere as skipped sources. Blocking: run it in a thread."""
    routes: dict[Path, list[Path]] = {}
    skipped: list[IngestedSource] = []
    for path in files:
        why = None
        try:
            fmt = _format(path, format) if path.is_file() else None
            cwd = source_cwd(path, fmt) if fmt in ROUTABLE else None
        except (OSError, ValueError) as exc:
            fmt, cwd, why = None, None, f"cannot read it ({type(exc).__name__})"
        project = find_project(cwd, markers, layout=layout) if cwd else None
        if project is not None:
            routes.setdefault(project, []).append(path)
            continue
        if why is None and fmt not in ROUTABLE:
            why = (
                "no working directory recorded (only Codex and Claude Code transcripts "
                "name theirs): ingest it with --workspace"
            )
        elif why is None:
            why = f"its working directory ({cwd or 'not recorded'}) is not in a project here"
        skipped.append(
            IngestedSource(
                path=str(path), format=fmt, status="skipped", error=f"{NOT_ROUTED}: {why}"
            )
        )
    return routes, skipped
