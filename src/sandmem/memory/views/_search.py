"""Ranked search over memory: sections of ``MEMORY.md``, rollout summaries and skills.

Every Markdown file is split into *sections* at its headings. Each section is a row of a SQLite
FTS5 table, which tokenizes it (Unicode words, lower-cased, Porter-stemmed), and of a plain
``sections`` table holding where it is and its length in tokens (its own heading's tokens
weigh ``HEADING_WEIGHT`` times its body's). ``rank`` scores sections with Okapi BM25 in one SQL
statement over FTS5's term index (``fts5vocab``), using the always-positive inverse document
frequency ``ln(1 + (N - n + 0.5) / (n + 0.5))``: FTS5's built-in ``bm25()`` floors the weight
of a word found in most sections at 1e-6, so on a small memory every hit scored the same.
Each hit points at its section's best line: the line scoring highest with the same term
weights (length-normalised among the section's lines).

The same tables serve two callers, so they rank identically by construction:
``search_memory`` (the pure core: file texts in, hits out) builds them in memory for one
call; the layout index (``_index``) keeps them in ``.index.sqlite`` and updates the rows of the
files that changed. Scores are summed in query-term order whatever order SQLite visits rows in,
so the two agree to the last bit. The query is tokenized as data (never parsed as FTS5 syntax),
so no input can be a syntax error; any of its terms may match.

One query's work is bounded (``SCAN_BUDGET``): its terms are taken rarest first while their
occurrences fit, those rank every section holding them, and the best ``RESCORE_DEPTH`` are
scored again with every term (``rank``): a word found in most sections orders the hits but
selects none.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sandmem._errors import UserError
from sandmem.memory import _files
from sandmem.memory.layout import MemoryPaths, parse_header, read_text
from sandmem.sandboxes._session import SandboxSession

#: how many levels of folders the full scan enters under ``rollout_summaries/`` and ``skills/``
SCAN_DEPTH = 12

#: at most this many distinct query words are used
MAX_QUERY_TERMS = 32
#: only this many characters of a query are tokenized (a bound on one request's work: far
#: more than ``MAX_QUERY_TERMS`` words need)
MAX_QUERY_CHARS = 4096
#: snippets are cut to this many characters
SNIPPET_CHARS = 160
#: at most this many occurrences of query terms are scanned to rank one query: terms are
#: taken rarest first while their occurrences fit (the rarest always); the more common rest,
#: found in thousands of sections of a large memory, are left out (``within_budget``). On a
#: small memory every term fits and nothing is left out.
SCAN_BUDGET = 5_000
#: how many sections the terms within ``SCAN_BUDGET`` select to be scored with every term
RESCORE_DEPTH = 100
#: a heading match counts this much more than a body match
HEADING_WEIGHT = 3.0
#: BM25's term-frequency saturation and length normalisation (the usual values)
BM25_K1 = 1.2
BM25_B = 0.75

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_TOKENIZE = "tokenize='porter unicode61'"
#: the tables of the searchable sections (in ``.index.sqlite``, or in memory for one call)
SCHEMA = (
    """CREATE TABLE sections (
        id INTEGER PRIMARY KEY, path TEXT, start INTEGER, heading TEXT, first_line TEXT,
        length REAL DEFAULT 0)""",
    "CREATE INDEX sections_path ON sections (path)",
    f"CREATE VIRTUAL TABLE sections_fts USING fts5(heading, body, {_TOKENIZE})",
)
#: per-connection scratch tables: FTS5's vocabularies of the sections, and tables that
#: tokenize the query, new sections (for their lengths) and candidate lines
_SCRATCH = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.section_terms USING fts5vocab(main, sections_fts, "
    "'instance')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.section_rows USING fts5vocab(main, sections_fts, "
    "'row')",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.query USING fts5(text, {_TOKENIZE})",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_terms USING fts5vocab(temp, query, 'instance')",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.stage USING fts5(heading, body, {_TOKENIZE})",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.stage_terms USING fts5vocab(temp, stage, 'instance')",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.stage_lines USING fts5(text, {_TOKENIZE})",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.stage_line_terms USING fts5vocab(temp, "
    "stage_lines, 'instance')",
)
_WEIGHTED = f"CASE col WHEN 'heading' THEN {HEADING_WEIGHT!r} ELSE 1.0 END"


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
    #: the query terms the section holds (how much of the query it covers)
    matched: frozenset[str] = field(default=frozenset(), compare=False)
    #: the section's row id in the search tables (0: not from a table)
    sid: int = field(default=0, compare=False)


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
    in order of first appearance, at most ``MAX_QUERY_TERMS``, from the first
    ``MAX_QUERY_CHARS`` characters. The query is tokenized as data, never parsed as FTS5
    syntax, so no input can be a syntax error; the work is linear in the (capped) query."""
    conn.execute("DELETE FROM temp.query")
    conn.execute("INSERT INTO temp.query (rowid, text) VALUES (1, ?)", (capped(query),))
    terms: dict[str, None] = {}
    for (term,) in conn.execute("SELECT term FROM temp.query_terms ORDER BY offset"):
        terms.setdefault(str(term))
        if len(terms) == MAX_QUERY_TERMS:
            break
    conn.execute("DELETE FROM temp.query")
    return list(terms)


def capped(query: str) -> str:
    """The first ``MAX_QUERY_CHARS`` characters of ``query``, without a word cut in two."""
    if len(query) <= MAX_QUERY_CHARS:
        return query
    head = query[:MAX_QUERY_CHARS]
    if query[MAX_QUERY_CHARS].isspace():
        return head
    cut = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    return head[:cut] if cut > 0 else head


def create_tables(conn: sqlite3.Connection) -> None:
    """Create the search tables (``SCHEMA``) in ``conn``'s main database."""
    _create(conn, SCHEMA)


def scratch(conn: sqlite3.Connection) -> None:
    """Create this connection's scratch tables (``_SCRATCH``), once."""
    _create(conn, _SCRATCH)


def _create(conn: sqlite3.Connection, statements: tuple[str, ...]) -> None:
    try:
        for statement in statements:
            conn.execute(statement)
    except sqlite3.OperationalError as exc:
        raise UserError(
            f"memory search needs SQLite with FTS5, which this Python's sqlite3 lacks ({exc}); "
            "use a Python build whose SQLite has FTS5 enabled"
        ) from exc


def _connect() -> sqlite3.Connection:
    """A fresh in-memory search database."""
    conn = sqlite3.connect(":memory:")
    try:
        create_tables(conn)
        scratch(conn)
    except UserError:
        conn.close()
        raise
    return conn


def _snippet(line: str) -> str:
    text = " ".join(line.split())
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1] + "…"


# ---------------------------------------------------------------- writing


def add_file(conn: sqlite3.Connection, path: str, text: str) -> None:
    """Add the sections of one file (``drop_file`` it first when it was there); their
    lengths are set by the next ``fill_lengths``."""
    for section in split_sections(path, text):
        body = "\n".join(section.lines[1:] if section.heading is not None else section.lines)
        cur = conn.execute(
            "INSERT INTO sections (path, start, heading, first_line) VALUES (?, ?, ?, ?)",
            (path, section.start, section.heading, section.lines[0] if section.lines else ""),
        )
        row = (cur.lastrowid, section.title, body)
        conn.execute("INSERT INTO sections_fts (rowid, heading, body) VALUES (?, ?, ?)", row)
        conn.execute("INSERT INTO temp.stage (rowid, heading, body) VALUES (?, ?, ?)", row)


def drop_file(conn: sqlite3.Connection, path: str) -> None:
    """Remove the sections of one file."""
    conn.execute(
        "DELETE FROM sections_fts WHERE rowid IN (SELECT id FROM sections WHERE path = ?)",
        (path,),
    )
    conn.execute("DELETE FROM sections WHERE path = ?", (path,))


def fill_lengths(conn: sqlite3.Connection) -> None:
    """Set the length (heading tokens weighted) of the sections added since the last call,
    counted from their copy in the scratch table ``stage``, then empty it."""
    conn.execute(
        "UPDATE sections SET length = counted.length FROM (SELECT doc, "
        f"sum({_WEIGHTED}) AS length FROM temp.stage_terms GROUP BY doc) AS counted "
        "WHERE sections.id = counted.doc"
    )
    conn.execute("DELETE FROM temp.stage")


# ---------------------------------------------------------------- ranking


def corpus(conn: sqlite3.Connection) -> tuple[int, float]:
    """How many sections there are and their summed length (BM25's averages)."""
    total, length_sum = conn.execute(
        "SELECT count(*), coalesce(sum(length), 0) FROM sections"
    ).fetchone()
    return int(total), float(length_sum)


def rank(
    conn: sqlite3.Connection, query: str, limit: int, sizes: tuple[int, float] | None = None
) -> list[Hit]:
    """The ``limit`` best sections for ``query``, best first (ties: by path, then line).
    ``sizes``: ``corpus(conn)`` when the caller keeps it.

    When the query's terms occur more often than ``SCAN_BUDGET`` allows, ranking takes two
    steps: the terms that fit (rarest first) rank every section holding them, and the best
    ``RESCORE_DEPTH`` of those are scored again with every term of the query (their text
    tokenized anew), so a common word still orders the candidates it cannot select."""
    if limit < 1:
        raise UserError(f"the search limit must be at least 1, got {limit}")
    terms = query_terms(conn, query)
    total, length_sum = sizes if sizes is not None else corpus(conn)
    if not terms or not total:
        return []
    counts = _counts(conn, terms)
    present = [i for i, (docs, _) in enumerate(counts) if docs]
    kept = within_budget([occurrences for _, occurrences in counts], SCAN_BUDGET)
    if not kept:
        return []
    idf = [_weight(total, docs) for docs, _ in counts]
    average = (length_sum / total) or 1.0
    pruned = len(kept) < len(present)
    probe = [terms[i] for i in kept]
    top = _scan(
        conn, probe, [idf[i] for i in kept], average, max(limit, RESCORE_DEPTH) if pruned else limit
    )
    used = kept
    if pruned:
        used = present
        top = _rescored(conn, [terms[i] for i in used], [idf[i] for i in used], average, top)
        top = top[:limit]
    terms, idf = [terms[i] for i in used], [idf[i] for i in used]
    best = _best_lines(conn, terms, idf, top)
    hits = []
    for t in top:
        line, snippet = best.get(t.sid, (t.start, _snippet(t.lines[0])))
        matched = frozenset(term for i, term in enumerate(terms) if int(t.mask) >> i & 1)
        hits.append(Hit(t.path, line, round(t.score, 6), snippet, t.heading, matched, t.sid))
    return hits


def _scan(
    conn: sqlite3.Connection, terms: list[str], idf: list[float], average: float, limit: int
) -> list[_Top]:
    """BM25 over every section holding one of ``terms``: the ``limit`` best."""
    query_rows = ", ".join("(?, ?, ?)" for _ in terms)
    # one column per term, added in term order: the sum does not depend on SQLite's row order
    summed = " + ".join(
        f"coalesce(max(CASE i WHEN {i} THEN part END), 0.0)" for i in range(len(terms))
    )
    sql = f"""
        WITH q(i, term, idf) AS (VALUES {query_rows}),
        tf(doc, i, idf, tf) AS (
            SELECT t.doc, q.i, q.idf, sum(CASE t.col WHEN 'heading' THEN ? ELSE 1.0 END)
            FROM q CROSS JOIN temp.section_terms AS t ON t.term = q.term
            GROUP BY q.i, t.doc
        ),
        parts(doc, i, part) AS (
            SELECT tf.doc, tf.i,
                tf.idf * tf.tf * ? / (tf.tf + ? * (1 - ? + ? * s.length / ?))
            FROM tf JOIN sections AS s ON s.id = tf.doc
        ),
        scored(doc, score, mask) AS (
            SELECT doc, {summed}, sum(1 << i) FROM parts GROUP BY doc
        ),
        top(id, path, start, heading, first_line, score, mask, length) AS (
            SELECT s.id, s.path, s.start, s.heading, s.first_line, scored.score, scored.mask,
                s.length
            FROM scored JOIN sections AS s ON s.id = scored.doc
            ORDER BY scored.score DESC, s.path, s.start LIMIT ?
        )
        SELECT top.id, top.path, top.start, top.heading, top.first_line, f.body, top.score,
            top.mask, f.heading, top.length
        FROM top JOIN sections_fts AS f ON f.rowid = top.id
        ORDER BY top.score DESC, top.path, top.start
    """
    params: list[object] = []
    for i, (term, weight) in enumerate(zip(terms, idf, strict=True)):
        params += [i, term, weight]
    params += [HEADING_WEIGHT, BM25_K1 + 1, BM25_K1, BM25_B, BM25_B, average, limit]
    return [
        _Top(
            int(row[0]),
            str(row[1]),
            int(row[2]),
            row[3],
            str(row[4]),
            str(row[5]),
            float(row[6]),
            int(row[7]),
            str(row[8] or ""),
            float(row[9] or 0.0),
        )
        for row in conn.execute(sql, params)
    ]


def _rescored(
    conn: sqlite3.Connection, terms: list[str], idf: list[float], average: float, top: list[_Top]
) -> list[_Top]:
    """``top`` scored with every one of ``terms`` (the same BM25 as ``_scan``, its terms
    counted from the sections' text tokenized again in the scratch table ``stage``), best
    first (ties: by path, then line)."""
    conn.executemany(
        "INSERT INTO temp.stage (rowid, heading, body) VALUES (?, ?, ?)",
        [(t.sid, t.title, t.body) for t in top],
    )
    number = {term: i for i, term in enumerate(terms)}
    freq: dict[tuple[int, int], float] = {}
    marks = ",".join("?" * len(terms))
    for doc, term, col in conn.execute(
        f"SELECT doc, term, col FROM temp.stage_terms WHERE term IN ({marks})", terms
    ):
        key = (int(doc), number[str(term)])
        freq[key] = freq.get(key, 0.0) + (HEADING_WEIGHT if col == "heading" else 1.0)
    conn.execute("DELETE FROM temp.stage")
    out = []
    for t in top:
        score, mask = 0.0, 0
        norm = BM25_K1 * (1 - BM25_B + BM25_B * t.length / average)
        for i, weight in enumerate(idf):
            tf = freq.get((t.sid, i))
            if tf:
                score += weight * tf * (BM25_K1 + 1) / (tf + norm)
                mask |= 1 << i
        out.append(replace(t, score=score, mask=mask))
    out.sort(key=lambda t: (-t.score, t.path, t.start))
    return out


def _counts(conn: sqlite3.Connection, terms: list[str]) -> list[tuple[int, int]]:
    """Each term's number of sections and of occurrences (0, 0 when absent)."""
    found = []
    for term in terms:
        row = conn.execute(
            "SELECT doc, cnt FROM temp.section_rows WHERE term = ?", (term,)
        ).fetchone()
        found.append((int(row[0]), int(row[1])) if row else (0, 0))
    return found


def _weight(total: int, n: int) -> float:
    return math.log(1 + (total - n + 0.5) / (n + 0.5))


def _idf(conn: sqlite3.Connection, terms: list[str], total: int) -> list[float]:
    return [_weight(total, n) for n, _ in _counts(conn, terms)]


#: values bound to one ``IN (...)`` list by ``rows_in``
IN_CHUNK = 500


def rows_in(conn: sqlite3.Connection, sql: str, ids: Sequence[Any]) -> Iterator[Any]:
    """The rows of ``sql`` for ``ids``: its ``{marks}`` becomes the placeholders of an ``IN``
    list, run ``IN_CHUNK`` values at a time (SQLite bounds the variables of one statement)."""
    for start in range(0, len(ids), IN_CHUNK):
        part = list(ids[start : start + IN_CHUNK])
        yield from conn.execute(sql.format(marks=",".join("?" * len(part))), part)


def within_budget(costs: Sequence[int], budget: int) -> list[int]:
    """The indices (ascending) of the query terms a ranking uses: rarest first (smallest
    ``costs``: the occurrences or rows a term's scan visits; ties in query order) while their
    summed cost stays within ``budget``, and always the rarest present one. Absent terms
    (cost 0) match nothing and are left out. A term past the budget is in so many rows that
    it says little about any of them; leaving it out bounds one query's work whatever the
    size of the memory (see ``SCAN_BUDGET``)."""
    kept: list[int] = []
    spent = 0
    for i in sorted((i for i, c in enumerate(costs) if c > 0), key=lambda i: (costs[i], i)):
        if kept and spent + costs[i] > budget:
            break
        kept.append(i)
        spent += costs[i]
    return sorted(kept)


def section_hits(
    conn: sqlite3.Connection, scored: list[tuple[int, float]], query: str, total: int
) -> list[Hit]:
    """Hits for sections found another way than BM25 (``scored``: section id and score, in
    order): each points at its best-matching line for ``query``'s terms, or at its first line
    when none of them is in it. Ids with no row are left out."""
    if not scored:
        return []
    terms = query_terms(conn, query)
    ids = [sid for sid, _ in scored]
    marks = ",".join("?" * len(ids))
    rows = {
        int(r[0]): r
        for r in conn.execute(
            "SELECT s.id, s.path, s.start, s.heading, s.first_line, f.body FROM sections AS s "
            f"JOIN sections_fts AS f ON f.rowid = s.id WHERE s.id IN ({marks})",
            ids,
        )
    }
    top = [
        _Top(int(r[0]), str(r[1]), int(r[2]), r[3], str(r[4]), str(r[5]), score, 0)
        for r, score in ((rows[sid], score) for sid, score in scored if sid in rows)
    ]
    best = _best_lines(conn, terms, _idf(conn, terms, total), top) if terms else {}
    hits = []
    for t in top:
        line, snippet = best.get(t.sid, (t.start, _snippet(t.lines[0])))
        hits.append(Hit(t.path, line, round(t.score, 6), snippet, t.heading, frozenset(), t.sid))
    return hits


@dataclass(frozen=True)
class _Top:
    sid: int
    path: str
    start: int
    heading: str | None
    first_line: str
    body: str
    score: float
    mask: int
    #: the section's own heading as indexed, and its length (``_rescored``)
    title: str = ""
    length: float = 0.0

    @property
    def lines(self) -> list[str]:
        """The section's lines, as in the file."""
        body = self.body.split("\n")
        return [self.first_line, *body] if self.heading is not None else body


def _best_lines(
    conn: sqlite3.Connection, terms: list[str], idf: list[float], top: list[_Top]
) -> dict[int, tuple[int, str]]:
    """Each section's best line ``(line number, snippet)`` by section id: BM25 with the
    sections' term weights, lengths normalised among the section's non-blank lines; the
    first line wins a tie. Sections without a matching line are left out."""
    owners: dict[int, tuple[_Top, int, str]] = {}
    for section in top:
        for offset, line in enumerate(section.lines):
            if line.strip():
                owners[len(owners) + 1] = (section, section.start + offset, line)
    conn.executemany(
        "INSERT INTO temp.stage_lines (rowid, text) VALUES (?, ?)",
        [(rowid, line) for rowid, (_, _, line) in owners.items()],
    )
    lengths = dict.fromkeys(owners, 0)
    for doc, count in conn.execute("SELECT doc, count(*) FROM temp.stage_line_terms GROUP BY doc"):
        lengths[int(doc)] = int(count)
    weight = dict(zip(terms, idf, strict=True))
    counts: dict[int, dict[str, int]] = {}
    marks = ",".join("?" * len(terms))
    for doc, term in conn.execute(
        f"SELECT doc, term FROM temp.stage_line_terms WHERE term IN ({marks})", terms
    ):
        found = counts.setdefault(int(doc), {})
        found[str(term)] = found.get(str(term), 0) + 1
    conn.execute("DELETE FROM temp.stage_lines")
    per_section: dict[int, list[int]] = {}
    for rowid, (section, _, _) in owners.items():
        per_section.setdefault(section.sid, []).append(rowid)
    best: dict[int, tuple[int, str]] = {}
    for sid, rowids in per_section.items():
        average = (sum(lengths[r] for r in rowids) / len(rowids)) or 1.0
        scored = []
        for rowid in rowids:
            found = counts.get(rowid, {})
            norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths[rowid] / average)
            score = sum(
                weight[t] * found[t] * (BM25_K1 + 1) / (found[t] + norm)
                for t in terms
                if t in found
            )
            if score > 0:
                scored.append((-score, owners[rowid][1], owners[rowid][2]))
        if scored:
            _, number, text = min(scored)
            best[sid] = (number, _snippet(text))
    return best


def search_memory(files: Mapping[str, str], query: str, limit: int = 10) -> list[Hit]:
    """Rank the sections of ``files`` (path → Markdown text) for ``query``, best first.

    Each hit points at the section's best-matching line. A query without words, or with no
    match, gives no hits.
    """
    if limit < 1:
        raise UserError(f"the search limit must be at least 1, got {limit}")
    conn = _connect()
    try:
        for path in sorted(files):
            add_file(conn, path, files[path])
        fill_lengths(conn)
        return rank(conn, query, limit)
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
    ``skills/`` (hidden files skipped). Paths are workspace-relative. The full scan the
    index (``_index``) is checked against; the commands read the index."""
    found: dict[str, str] = {}
    memory_md = await read_text(session, paths.memory_md)
    if memory_md is not None:
        found[paths.memory_md] = memory_md
    for top in (paths.summaries_dir, paths.skills_dir):
        # links are never followed, hidden names are skipped (as the consolidation's tools)
        for path in sorted(await _files.walk(session, top, depth=SCAN_DEPTH)):
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
