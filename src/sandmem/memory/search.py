"""Ranked search over memory: sections of ``MEMORY.md``, rollout summaries and skills.

Every Markdown file is split into *sections* at its headings; each section is a document in an
in-memory SQLite FTS5 index (porter stemming) ranked with ``bm25()``. The index is rebuilt on
every call: memory is small (``MEMORY.md`` has a byte budget), so this takes milliseconds and
needs no cache to invalidate. The query is reduced to its words, each quoted and OR-ed, so no
user input can be an FTS5 syntax error.

``search_memory`` is the pure core (file texts in, hits out); ``search_layout`` reads the files
of a layout through the sandbox session.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass

from sandmem._errors import UserError
from sandmem.memory._scoped_tools import ScopedFiles
from sandmem.memory.storage import MemoryPaths, parse_header, read_text
from sandmem.sandboxes._session import SandboxSession

#: at most this many distinct query words are used
MAX_QUERY_TERMS = 32
#: snippets are cut to this many characters
SNIPPET_CHARS = 160
#: a heading match counts this much more than a body match
HEADING_WEIGHT = 3.0

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Hit:
    """One ranked section: ``path`` (workspace-relative) and ``line`` (1-based) of its best
    matching line, ``score`` (higher is better), that line as ``snippet``, and the section's
    heading path (``"Invoice bug > Learnings"``; ``None`` before the first heading)."""

    path: str
    line: int
    score: float
    snippet: str
    heading: str | None


@dataclass(frozen=True)
class Section:
    """Lines ``start``..``start + len(lines) - 1`` (1-based) of ``path``: ``heading`` is the
    path of headings down to this one, ``title`` this section's own heading ("" before the
    first heading). Only ``title`` is indexed as the heading: a parent's words would
    otherwise make every subsection match."""

    path: str
    start: int
    heading: str | None
    title: str
    lines: list[str]


def split_sections(path: str, text: str) -> list[Section]:
    """Split Markdown at its ATX headings (``#`` lines outside fenced code). The text before
    the first heading is a section too when it is not blank."""
    sections: list[Section] = []
    trail: list[tuple[int, str]] = []  # (level, title) of the enclosing headings
    start, current = 1, []
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
        match = None if in_fence else _HEADING.match(line)
        if match is None:
            current.append(line)
            continue
        _close(sections, path, start, trail, current)
        level, title = len(match.group(1)), match.group(2).strip()
        trail = [*(t for t in trail if t[0] < level), (level, title)]
        start, current = number, [line]
    _close(sections, path, start, trail, current)
    return sections


def _close(
    sections: list[Section],
    path: str,
    start: int,
    trail: list[tuple[int, str]],
    lines: list[str],
) -> None:
    heading = " > ".join(title for _, title in trail) if trail else None
    if heading is not None or any(line.strip() for line in lines):
        title = trail[-1][1] if trail else ""
        sections.append(Section(path, start, heading, title, lines))


def fts_query(query: str) -> str | None:
    """The words of ``query`` as quoted FTS5 terms joined by ``OR``; ``None`` without words."""
    words: list[str] = []
    for word in _WORD.findall(query.lower()):
        if word not in words:
            words.append(word)
    if not words:
        return None
    return " OR ".join(f'"{word}"' for word in words[:MAX_QUERY_TERMS])


def _connect() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(
            "CREATE VIRTUAL TABLE sections USING fts5("
            "heading, body, sid UNINDEXED, tokenize='porter unicode61')"
        )
        conn.execute(
            "CREATE VIRTUAL TABLE lines USING fts5("
            "text, sid UNINDEXED, lineno UNINDEXED, tokenize='porter unicode61')"
        )
    except sqlite3.OperationalError as exc:
        conn.close()
        raise UserError(
            f"memory search needs SQLite with FTS5, which this Python's sqlite3 lacks ({exc}); "
            "use a Python build whose SQLite has FTS5 enabled"
        ) from exc
    return conn


def _snippet(line: str) -> str:
    text = " ".join(line.split())
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1] + "…"


def _index(conn: sqlite3.Connection, sections: list[Section]) -> None:
    for sid, section in enumerate(sections):
        body = section.lines[1:] if section.heading is not None else section.lines
        conn.execute(
            "INSERT INTO sections (heading, body, sid) VALUES (?, ?, ?)",
            (section.title, "\n".join(body), sid),
        )
        conn.executemany(
            "INSERT INTO lines (text, sid, lineno) VALUES (?, ?, ?)",
            [
                (line, sid, section.start + offset)
                for offset, line in enumerate(section.lines)
                if line.strip()
            ],
        )


def _best_line(conn: sqlite3.Connection, match: str, section: Section, sid: int) -> int:
    row = conn.execute(
        "SELECT lineno FROM lines WHERE lines MATCH ? AND sid = ? "
        "ORDER BY bm25(lines), lineno LIMIT 1",
        (match, sid),
    ).fetchone()
    return int(row[0]) if row is not None else section.start


def search_memory(files: Mapping[str, str], query: str, limit: int = 10) -> list[Hit]:
    """Rank the sections of ``files`` (path → Markdown text) for ``query``, best first.

    Each hit points at the section's best-matching line. A query without words, or with no
    match, gives no hits.
    """
    if limit < 1:
        raise UserError(f"the search limit must be at least 1, got {limit}")
    match = fts_query(query)
    if match is None:
        return []
    sections = [s for path in sorted(files) for s in split_sections(path, files[path])]
    if not sections:
        return []
    conn = _connect()
    try:
        _index(conn, sections)
        rows = conn.execute(
            "SELECT sid, bm25(sections, ?, 1.0) AS rank FROM sections WHERE sections MATCH ? "
            "ORDER BY rank, sid LIMIT ?",
            (HEADING_WEIGHT, match, limit),
        ).fetchall()
        hits = []
        for sid, rank in rows:
            section = sections[int(sid)]
            line = _best_line(conn, match, section, int(sid))
            text = section.lines[line - section.start]
            hits.append(
                Hit(section.path, line, round(-float(rank), 6), _snippet(text), section.heading)
            )
        return hits
    finally:
        conn.close()


def _without_header(text: str) -> str:
    """A rollout summary with its metadata header blanked (line numbers kept): ids and
    timestamps would match queries without saying anything."""
    fields, body = parse_header(text)
    if not fields:
        return text
    head = len(text.splitlines()) - len(body.splitlines())
    return "\n" * head + body


async def searchable_files(session: SandboxSession, paths: MemoryPaths) -> dict[str, str]:
    """The texts search covers: ``MEMORY.md``, every rollout summary, every file under
    ``skills/`` (hidden files skipped). Paths are workspace-relative."""
    found: dict[str, str] = {}
    memory_md = await read_text(session, paths.memory_md)
    if memory_md is not None:
        found[paths.memory_md] = memory_md
    scoped = ScopedFiles(session, paths.memories_dir)
    for top in (paths.summaries_dir, paths.skills_dir):
        if not await session.exists(top):
            continue
        for path in await scoped.walk(top):
            if top == paths.summaries_dir and not path.endswith(".md"):
                continue
            text = await read_text(session, path)
            if text is None or "\x00" in text:
                continue
            found[path] = _without_header(text) if top == paths.summaries_dir else text
    return found


async def search_layout(
    session: SandboxSession, paths: MemoryPaths, query: str, limit: int = 10
) -> list[Hit]:
    """``search_memory`` over the files of one layout, read through ``session``."""
    return search_memory(await searchable_files(session, paths), query, limit)
