"""Ranked search over memory: sections of ``MEMORY.md``, rollout summaries and skills.

Every Markdown file is split into *sections* at its headings; each section is a document of an
in-memory SQLite FTS5 index, which tokenizes it (Unicode words, lower-cased, Porter-stemmed).
The terms are read back through ``fts5vocab`` and ranked here with Okapi BM25 (a section's own
heading weighs ``HEADING_WEIGHT`` times its body), using the always-positive inverse document
frequency ``ln(1 + (N - n + 0.5) / (n + 0.5))``: FTS5's built-in ``bm25()`` floors the weight
of a word found in most sections at 1e-6, so on a small memory every hit scored the same.
The index is rebuilt on every call: memory is small (``MEMORY.md`` has a byte budget), so this
takes milliseconds and needs no cache to invalidate. The query is tokenized as data (never
parsed as FTS5 syntax), so no input can be a syntax error; any of its terms may match.

``search_memory`` is the pure core (file texts in, hits out); ``search_layout`` reads the files
of a layout through the sandbox session.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sandmem._errors import UserError
from sandmem.memory.generation._scoped_tools import ScopedFiles
from sandmem.memory.layout import MemoryPaths, parse_header, read_text
from sandmem.sandboxes._session import SandboxSession

#: at most this many distinct query words are used
MAX_QUERY_TERMS = 32
#: snippets are cut to this many characters
SNIPPET_CHARS = 160
#: a heading match counts this much more than a body match
HEADING_WEIGHT = 3.0
#: BM25's term-frequency saturation and length normalisation (the usual values)
BM25_K1 = 1.2
BM25_B = 0.75

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


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


def query_terms(conn: sqlite3.Connection, query: str) -> list[str]:
    """The distinct terms of ``query`` as the index sees them (lower-cased, Porter-stemmed),
    in order of first appearance, at most ``MAX_QUERY_TERMS``. The query is tokenized as
    data, never parsed as FTS5 syntax, so no input can be a syntax error."""
    conn.execute("DELETE FROM query")
    conn.execute("INSERT INTO query (rowid, text) VALUES (1, ?)", (query,))
    rows = conn.execute("SELECT term FROM query_terms ORDER BY offset").fetchall()
    terms: list[str] = []
    for (term,) in rows:
        if term not in terms:
            terms.append(str(term))
    return terms[:MAX_QUERY_TERMS]


def _connect() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    try:
        for statement in (
            "CREATE VIRTUAL TABLE sections USING fts5(heading, body, tokenize='porter unicode61')",
            "CREATE VIRTUAL TABLE section_terms USING fts5vocab(sections, 'instance')",
            "CREATE VIRTUAL TABLE lines USING fts5(text, tokenize='porter unicode61')",
            "CREATE VIRTUAL TABLE line_terms USING fts5vocab(lines, 'instance')",
            "CREATE VIRTUAL TABLE query USING fts5(text, tokenize='porter unicode61')",
            "CREATE VIRTUAL TABLE query_terms USING fts5vocab(query, 'instance')",
        ):
            conn.execute(statement)
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


def _index(conn: sqlite3.Connection, sections: list[Section]) -> list[tuple[int, int]]:
    """Index every section (rowid = its position) and every non-blank line; returns
    ``(section id, line number)`` for each indexed line (rowid = its position)."""
    lines: list[tuple[int, int]] = []
    for sid, section in enumerate(sections):
        body = section.lines[1:] if section.heading is not None else section.lines
        conn.execute(
            "INSERT INTO sections (rowid, heading, body) VALUES (?, ?, ?)",
            (sid, section.title, "\n".join(body)),
        )
        for offset, line in enumerate(section.lines):
            if line.strip():
                conn.execute("INSERT INTO lines (rowid, text) VALUES (?, ?)", (len(lines), line))
                lines.append((sid, section.start + offset))
    return lines


@dataclass
class _Docs:
    """Weighted term frequencies and lengths of the documents of one index."""

    tf: dict[int, dict[str, float]]
    length: dict[int, float]

    @classmethod
    def read(
        cls, conn: sqlite3.Connection, vocab: str, weights: Mapping[str, float], count: int
    ) -> _Docs:
        tf: dict[int, dict[str, float]] = {doc: {} for doc in range(count)}
        length = dict.fromkeys(range(count), 0.0)
        for term, doc, column in conn.execute(f"SELECT term, doc, col FROM {vocab}"):
            weight = weights.get(str(column), 1.0)
            counts = tf[int(doc)]
            counts[str(term)] = counts.get(str(term), 0.0) + weight
            length[int(doc)] += weight
        return cls(tf, length)

    def scores(self, terms: list[str], docs: Iterable[int] | None = None) -> dict[int, float]:
        """Okapi BM25 of each document that contains a term (``docs``: only these). The
        document frequencies are over all documents of the index."""
        total = len(self.tf)
        average = (sum(self.length.values()) / total) if total else 0.0
        frequency = {t: sum(1 for c in self.tf.values() if t in c) for t in terms}
        # the "+ 1" keeps the weight positive when a term is in most documents: FTS5's own
        # bm25() floors it at 1e-6 instead, so every hit of a common word scored the same
        idf = {t: math.log(1 + (total - n + 0.5) / (n + 0.5)) for t, n in frequency.items()}
        scored: dict[int, float] = {}
        for doc in self.tf if docs is None else docs:
            counts, norm = (
                self.tf[doc],
                BM25_K1 * (1 - BM25_B + BM25_B * self.length[doc] / (average or 1.0)),
            )
            score = sum(
                idf[t] * counts[t] * (BM25_K1 + 1) / (counts[t] + norm)
                for t in terms
                if t in counts
            )
            if score > 0:
                scored[doc] = score
        return scored


def search_memory(files: Mapping[str, str], query: str, limit: int = 10) -> list[Hit]:
    """Rank the sections of ``files`` (path → Markdown text) for ``query``, best first.

    Each hit points at the section's best-matching line. A query without words, or with no
    match, gives no hits.
    """
    if limit < 1:
        raise UserError(f"the search limit must be at least 1, got {limit}")
    sections = [s for path in sorted(files) for s in split_sections(path, files[path])]
    conn = _connect()
    try:
        terms = query_terms(conn, query)
        if not terms or not sections:
            return []
        line_ids = _index(conn, sections)
        weights = {"heading": HEADING_WEIGHT, "body": 1.0}
        section_docs = _Docs.read(conn, "section_terms", weights, len(sections))
        line_docs = _Docs.read(conn, "line_terms", {}, len(line_ids))
    finally:
        conn.close()
    ranked = sorted(section_docs.scores(terms).items(), key=lambda item: (-item[1], item[0]))
    hits = []
    for sid, score in ranked[:limit]:
        section = sections[sid]
        own = [i for i, (line_sid, _) in enumerate(line_ids) if line_sid == sid]
        best = sorted(line_docs.scores(terms, own).items(), key=lambda item: (-item[1], item[0]))
        line = line_ids[best[0][0]][1] if best else section.start
        text = section.lines[line - section.start]
        hits.append(Hit(section.path, line, round(score, 6), _snippet(text), section.heading))
    return hits


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
