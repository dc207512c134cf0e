"""The layout index: a derived SQLite file that makes looking at memory cost what changed.

``<memories_dir>/.index.sqlite`` caches what the views would otherwise read from every file on
every call: per conversation, its rollout file's fingerprint, first user message and start
time, and whether its raw memory is up to date and which rollout summary it names; and the
search sections (with FTS5 tables) of ``MEMORY.md``, the rollout summaries and the skills.

It is never the source of truth. Each row carries the size and modification time of the
files it was derived from; every use first lists the layout's directories (one ``ls`` per
directory: names, sizes and mtimes, nothing read) and derives again exactly the rows whose
files differ, appeared or went away. So a crash between a file write and the index update,
a write by another process, an edit by hand or a deleted or corrupt index file cost a re-read
of what differs, never a wrong answer. A row whose file was modified less than ``RACY_NS``
before it was derived is stored as unsure and derived again next time (a file rewritten
twice within one timestamp tick, with the same size, would otherwise look unchanged). A
backend that reports no mtime (``InMemorySandboxSession``) gets no trusted rows: it is
re-derived on every call, correctly but without the speed.

The file is read and written only through the sandbox session, so it goes through the one
host-filesystem layer like every other workspace file: SQLite never opens a workspace path.
The database lives in memory (``sqlite3.deserialize``) and is written back with
``session.write`` (atomic: a reader sees the old or the new index, never a torn one) only when
something changed. Two processes refreshing at once each write a complete index; whichever
lands, the next reader checks it against the files again. A hidden file, it is left out of
listings, store sync, the redaction pass and ``sandmem memory tree``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field

from sandmem._errors import SandboxError, UserError
from sandmem._items import content_text
from sandmem.memory._results import IndexReport
from sandmem.memory.generation import phase_one
from sandmem.memory.generation.phase_two import read_isolated
from sandmem.memory.layout import (
    INDEX_DB,
    INDEX_LOCK,
    SUMMARIES_DIR,
    MemoryPaths,
    fingerprint,
    make_way,
    parse_header,
)
from sandmem.memory.rollouts import parse_segment
from sandmem.memory.views._search import (
    BM25_B,
    BM25_K1,
    HEADING_WEIGHT,
    Hit,
    _snippet,
    _without_header,
    query_terms,
    split_sections,
)
from sandmem.sandboxes._paths import no_symlinks
from sandmem.sandboxes._session import SandboxSession
from sandmem.sandboxes._types import EntryKind

logger = logging.getLogger("sandmem.memory")

INDEX_NAME = INDEX_DB
#: how long a reader waits for another process refreshing the index
LOCK_TIMEOUT_S = 60.0
#: bump when the schema or what a row holds changes: an index of another version is rebuilt
INDEX_VERSION = 1
#: a file modified this recently before its row was derived is checked again next time
RACY_NS = 2_000_000_000
#: a conversation's task is cut to this many characters
TASK_CHARS = 120
#: files read at once while deriving rows
_READ_BATCH = 64
#: directories below skills/ deeper than this are not entered (as ``ScopedFiles.walk``)
MAX_DEPTH = 8

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value)",
    """CREATE TABLE conversations (
        rid TEXT PRIMARY KEY, file_size INTEGER, file_mtime INTEGER, raw_size INTEGER,
        raw_mtime INTEGER, segments INTEGER, updated_at TEXT, terminal_state TEXT,
        started_at TEXT, task TEXT, up_to_date INTEGER, raw_present INTEGER,
        summary_name TEXT)""",
    "CREATE INDEX conversations_updated ON conversations (updated_at DESC, rid)",
    "CREATE TABLE docs (path TEXT PRIMARY KEY, size INTEGER, mtime INTEGER)",
    """CREATE TABLE sections (
        id INTEGER PRIMARY KEY, path TEXT, start INTEGER, heading TEXT, first_line TEXT,
        length REAL, first_line_id INTEGER, line_count INTEGER)""",
    "CREATE INDEX sections_path ON sections (path)",
    """CREATE TABLE lines (
        id INTEGER PRIMARY KEY, section INTEGER, line INTEGER, text TEXT, length REAL)""",
    "CREATE INDEX lines_section ON lines (section)",
    "CREATE VIRTUAL TABLE sections_fts USING fts5(heading, body, tokenize='porter unicode61')",
    "CREATE VIRTUAL TABLE lines_fts USING fts5(text, tokenize='porter unicode61')",
)
_SESSION_TABLES = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.section_terms USING fts5vocab(main, sections_fts, "
    "'instance')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.section_rows USING fts5vocab(main, sections_fts, "
    "'row')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.line_terms USING fts5vocab(main, lines_fts, "
    "'instance')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.line_rows USING fts5vocab(main, lines_fts, 'row')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.query USING fts5(text, tokenize='porter unicode61')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_terms USING fts5vocab(temp, query, 'instance')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.stage_sections USING fts5(heading, body, "
    "tokenize='porter unicode61')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.stage_section_terms USING fts5vocab(temp, "
    "stage_sections, 'instance')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.stage_lines USING fts5(text, "
    "tokenize='porter unicode61')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.stage_line_terms USING fts5vocab(temp, "
    "stage_lines, 'instance')",
)

Stat = tuple[int, int | None]


@dataclass(frozen=True)
class Conversation:
    """What the index knows of one conversation's files (its state comes from
    ``generation_state.json``, read by the caller)."""

    rollout_id: str
    segments: int
    updated_at: str
    terminal_state: str
    started_at: str | None
    task: str | None
    up_to_date: bool
    raw_present: bool
    summary_name: str | None


@dataclass
class Listing:
    """The regular, visible files of a layout's directories, each ``(size, mtime_ns)``."""

    memories: dict[str, Stat] = field(default_factory=dict)
    sessions: dict[str, Stat] = field(default_factory=dict)
    raw: dict[str, Stat] = field(default_factory=dict)
    summaries: dict[str, Stat] = field(default_factory=dict)
    skills: dict[str, Stat] = field(default_factory=dict)


def first_segment(data: bytes) -> tuple[str | None, str | None]:
    """``updated_at`` of a rollout file's first segment and its first user message (on one
    line, cut to ``TASK_CHARS``); ``None`` for what cannot be read."""
    segment = parse_segment(data.split(b"\n", 1)[0])
    if segment is None:
        return None, None
    started = segment.updated_at
    task = None
    for item in segment.input:
        if item.get("role") == "user":
            text = " ".join(content_text(item.get("content"), sep=" ").split())
            if text:
                task = text if len(text) <= TASK_CHARS else text[: TASK_CHARS - 1] + "…"
                break
    return (str(started) if started else None), task


def summary_name(raw_memory_text: str | None) -> str | None:
    """The ``rollout_summaries/...`` file a raw memory points to (``None`` when unsafe)."""
    if raw_memory_text is None:
        return None
    name = parse_header(raw_memory_text)[0].get("rollout_summary_file", "")
    if not name.startswith(f"{SUMMARIES_DIR}/") or ".." in name.split("/"):
        return None
    return name


async def list_files(session: SandboxSession, top: str, depth: int) -> dict[str, Stat]:
    """Regular, visible files below ``top`` (``depth`` levels of subdirectories), with their
    stat; symlinks and special files are left out (never followed)."""
    found: dict[str, Stat] = {}
    pending = [(top, 0)]
    while pending:
        directory, level = pending.pop()
        try:
            entries = await session.stat_dir(directory)
        except SandboxError:
            continue  # missing, or not a directory
        for name, kind, size, mtime in entries:
            if name.startswith("."):
                continue
            if kind == EntryKind.FILE:
                found[f"{directory}/{name}"] = (size, mtime)
            elif kind == EntryKind.DIRECTORY and level < depth:
                pending.append((f"{directory}/{name}", level + 1))
    return found


async def list_layout(session: SandboxSession, paths: MemoryPaths) -> Listing:
    """One ``ls`` per directory of the layout (skills/ recursively)."""
    with no_symlinks():
        return Listing(
            memories=await list_files(session, paths.memories_dir, 0),
            sessions=await list_files(session, paths.sessions_dir, MAX_DEPTH),
            raw=await list_files(session, paths.raw_dir, MAX_DEPTH),
            summaries=await list_files(session, paths.summaries_dir, MAX_DEPTH),
            skills=await list_files(session, paths.skills_dir, MAX_DEPTH),
        )


def _create(conn: sqlite3.Connection) -> None:
    try:
        for statement in _SCHEMA:
            conn.execute(statement)
    except sqlite3.OperationalError as exc:
        conn.close()
        raise UserError(
            f"the memory index needs SQLite with FTS5, which this Python's sqlite3 lacks "
            f"({exc}); use a Python build whose SQLite has FTS5 enabled"
        ) from exc
    conn.execute("INSERT INTO meta VALUES ('dirty', 0)")
    conn.execute(f"PRAGMA user_version = {INDEX_VERSION}")
    conn.commit()


def _usable(conn: sqlite3.Connection) -> bool:
    """An index of this version that was not left half-updated by a crash."""
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != INDEX_VERSION:
            return False
        row = conn.execute("SELECT value FROM meta WHERE key = 'dirty'").fetchone()
        conn.execute("SELECT count(*) FROM conversations").fetchone()
    except sqlite3.DatabaseError as exc:
        logger.warning("memory index unreadable (%s): rebuilding it", exc)
        return False
    if row is None or row[0] != 0:
        logger.warning("memory index was left mid-update (a crash): rebuilding it")
        return False
    return True


def _connect(data: bytes | None) -> sqlite3.Connection:
    """An in-memory index: from ``data`` (a serialized index) when usable, else empty."""
    conn = sqlite3.connect(":memory:")
    if data:
        try:
            conn.deserialize(data)
        except sqlite3.DatabaseError as exc:
            logger.warning("memory index unreadable (%s): rebuilding it", exc)
        else:
            if _usable(conn):
                return conn
        conn.close()
        conn = sqlite3.connect(":memory:")
    _create(conn)
    return conn


def _open_file(fd: int) -> tuple[sqlite3.Connection, bool]:
    """The index in the file open as ``fd`` (SQLite opens ``/proc/self/fd/N``: the file the
    host-filesystem layer checked, whatever the path names now) and whether it is new. An
    unusable file is truncated and built again. The rollback journal stays in memory (no
    side file is created by name); a crash mid-update is caught by the ``dirty`` mark."""
    conn = _file_connection(fd)
    try:
        if os.fstat(fd).st_size and _usable(conn):
            return conn, False
    except sqlite3.DatabaseError as exc:
        logger.warning("memory index unreadable (%s): rebuilding it", exc)
    conn.close()
    os.ftruncate(fd, 0)
    conn = _file_connection(fd)
    _create(conn)
    return conn, True


def _file_connection(fd: int) -> sqlite3.Connection:
    conn = sqlite3.connect(f"/proc/self/fd/{fd}")
    try:
        conn.execute("PRAGMA journal_mode = MEMORY")
        conn.execute("PRAGMA synchronous = FULL")
    except sqlite3.DatabaseError:
        if os.fstat(fd).st_size == 0:
            conn.close()
            raise
        conn.close()
        os.ftruncate(fd, 0)  # not a database: start it again
        return _file_connection(fd)
    return conn


def _trusted(stat: Stat | None, started_ns: int) -> tuple[int | None, int | None]:
    """The stat to store: ``(None, None)`` for a missing file; the mtime as ``None`` (never
    matching) when the backend has none or the file changed within ``RACY_NS``."""
    if stat is None:
        return None, None
    size, mtime = stat
    if mtime is None or mtime > started_ns - RACY_NS:
        return size, None
    return size, mtime


def _matches(stored: tuple[int | None, int | None], stat: Stat | None) -> bool:
    if stat is None:
        return stored == (None, None)
    return stored[1] is not None and stored == stat


class LayoutIndex:
    """The index of one layout: ``refresh_*`` bring it in line with the files, ``save``
    commits (or writes back) what changed, ``close`` releases it.

    On a backend with host files (``session.open_host_fd``) SQLite works on the file
    itself, reading only the pages a query needs; an update marks the index ``dirty`` (and
    syncs) before its first change and clears the mark after the last, so an index a crash
    left half-updated is rebuilt, never trusted. Elsewhere the index is loaded in memory
    from ``read_bytes`` and written back whole with ``session.write`` (atomic)."""

    def __init__(
        self,
        session: SandboxSession,
        paths: MemoryPaths,
        conn: sqlite3.Connection,
        fd: int | None = None,
        *,
        keep: bool = True,
    ) -> None:
        self.session = session
        #: ``False``: an index for this call only (nowhere safe to keep it)
        self.keep = keep
        self.paths = paths
        self.conn = conn
        self.fd = fd
        self.listing = Listing()
        self.changed = False
        #: rows added since the last ``_fill_lengths``: (id, heading, body) and (id, text)
        self._new_sections: list[tuple[int, str, str]] = []
        self._new_lines: list[tuple[int, str]] = []

    @property
    def path(self) -> str:
        return f"{self.paths.memories_dir}/{INDEX_NAME}"

    @classmethod
    async def load(cls, session: SandboxSession, paths: MemoryPaths) -> LayoutIndex:
        path = f"{paths.memories_dir}/{INDEX_NAME}"
        with no_symlinks():
            if not await session.exists(paths.memories_dir):
                return cls(session, paths, _connect(None), keep=False)  # nowhere to keep it
            try:
                fd = await session.open_host_fd(path)
            except SandboxError as exc:  # a symlink or special file planted there
                logger.warning("memory index %s not used: %s", path, exc)
                return cls(session, paths, _connect(None), keep=False)
            if fd is not None:
                try:
                    conn, _new = _open_file(fd)
                except BaseException:
                    os.close(fd)
                    raise
                return cls(session, paths, conn, fd)
            try:
                found, _bad = await read_isolated(session, [path])
                data = found.get(path)
            except SandboxError:
                data = None
        return cls(session, paths, _connect(data))

    def touch(self) -> None:
        """Called before each change: the first one marks a file index ``dirty``, synced
        before any row changes."""
        if not self.changed and self.fd is not None:
            self.conn.execute("UPDATE meta SET value = 1 WHERE key = 'dirty'")
            self.conn.commit()
        self.changed = True

    async def save(self) -> None:
        """Commit what changed; a failed write is logged and forgotten: the next reader
        derives again what it lacks."""
        if not self.changed or not self.keep:
            return
        if self.fd is not None:
            self.conn.commit()
            self.conn.execute("UPDATE meta SET value = 0 WHERE key = 'dirty'")
            self.conn.commit()
            self.changed = False
            return
        self.conn.commit()
        data = self.conn.serialize()
        try:
            with no_symlinks():
                if await self.session.exists(self.paths.memories_dir):
                    await self.session.write(self.path, data)
            self.changed = False
        except SandboxError as exc:
            logger.warning("could not write the memory index %s: %s", self.path, exc)

    def close(self) -> None:
        self.conn.close()
        if self.fd is not None:  # after SQLite let go: closing it drops the process's locks
            os.close(self.fd)
            self.fd = None

    # ------------------------------------------------------------ conversations

    async def refresh_conversations(self) -> None:
        """List the layout and derive again every conversation whose rollout file or raw
        memory differs from its row."""
        started_ns = time.time_ns()
        self.listing = await list_layout(self.session, self.paths)
        rows = {
            rid: ((fs, fm), (rs, rm))
            for rid, fs, fm, rs, rm in self.conn.execute(
                "SELECT rid, file_size, file_mtime, raw_size, raw_mtime FROM conversations"
            )
        }
        current: dict[str, tuple[Stat, Stat | None]] = {}
        prefix = f"{self.paths.sessions_dir}/"
        for path, stat in self.listing.sessions.items():
            name = path[len(prefix) :]
            if name.endswith(".jsonl") and "/" not in name:
                rid = name[:-6]
                current[rid] = (stat, self.listing.raw.get(self.paths.raw_memory_file(rid)))
        gone = [rid for rid in rows if rid not in current]
        stale = [
            rid
            for rid, (file_stat, raw_stat) in current.items()
            if rid not in rows
            or not _matches(rows[rid][0], file_stat)
            or not _matches(rows[rid][1], raw_stat)
        ]
        if gone:
            self.conn.executemany("DELETE FROM conversations WHERE rid = ?", [(r,) for r in gone])
            self.touch()
        for start in range(0, len(stale), _READ_BATCH):
            batch = sorted(stale)[start : start + _READ_BATCH]
            await self._derive(batch, current, started_ns)

    async def _derive(
        self,
        batch: list[str],
        current: dict[str, tuple[Stat, Stat | None]],
        started_ns: int,
    ) -> None:
        files = [self.paths.rollout_file(r) for r in batch]
        raw_files = [self.paths.raw_memory_file(r) for r in batch]
        with no_symlinks():
            rollouts, _bad = await read_isolated(self.session, files)
            raws, _bad_raw = await read_isolated(self.session, raw_files)
        for rid, path, raw_path in zip(batch, files, raw_files, strict=True):
            self.touch()
            data = rollouts.get(path)
            if data is None:  # unreadable: no row, so it is looked at again next time
                self.conn.execute("DELETE FROM conversations WHERE rid = ?", (rid,))
                continue
            fp = fingerprint(data)
            started_at, task = first_segment(data)
            raw_data = raws.get(raw_path)
            raw = raw_data.decode("utf-8", "replace") if raw_data is not None else None
            file_stat, raw_stat = current[rid]
            self.conn.execute(
                "INSERT OR REPLACE INTO conversations VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    rid,
                    *_trusted(file_stat, started_ns),
                    *_trusted(raw_stat if raw is not None else None, started_ns),
                    fp.segments,
                    fp.updated_at,
                    fp.terminal_state,
                    started_at,
                    task,
                    int(phase_one.is_up_to_date(raw, fp)),
                    int(raw is not None),
                    summary_name(raw),
                ),
            )

    def conversations(self, limit: int | None = None, offset: int = 0) -> list[Conversation]:
        """The indexed conversations, most recently updated first (then by id): ``limit``
        of them (all when ``None``) after the first ``offset``."""
        return [
            Conversation(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), bool(r[7]), r[8])
            for r in self.conn.execute(
                "SELECT rid, segments, updated_at, terminal_state, started_at, task, "
                "up_to_date, raw_present, summary_name FROM conversations "
                "ORDER BY updated_at DESC, rid LIMIT ? OFFSET ?",
                (-1 if limit is None else limit, offset),
            )
        ]

    # ------------------------------------------------------------ search

    def _searchable(self) -> dict[str, Stat]:
        found: dict[str, Stat] = {}
        memory_md = self.listing.memories.get(self.paths.memory_md)
        if memory_md is not None:
            found[self.paths.memory_md] = memory_md
        for path, stat in self.listing.summaries.items():
            if path.endswith(".md"):
                found[path] = stat
        found.update(self.listing.skills)
        return found

    async def refresh_search(self) -> None:
        """Index again every searchable file that differs from its row (call after
        ``refresh_conversations``, which lists the layout)."""
        started_ns = time.time_ns()
        files = self._searchable()
        rows = {p: (s, m) for p, s, m in self.conn.execute("SELECT path, size, mtime FROM docs")}
        gone = [p for p in rows if p not in files]
        stale = sorted(
            p for p, stat in files.items() if p not in rows or not _matches(rows[p], stat)
        )
        for path in gone:
            self._drop(path)
        for start in range(0, len(stale), _READ_BATCH):
            batch = stale[start : start + _READ_BATCH]
            with no_symlinks():
                found, _bad = await read_isolated(self.session, batch)
            for path in batch:
                self._drop(path)
                data = found.get(path)
                if data is None:
                    continue  # unreadable: no row, looked at again next time
                self.conn.execute(
                    "INSERT INTO docs VALUES (?, ?, ?)", (path, *_trusted(files[path], started_ns))
                )
                text = data.decode("utf-8", "replace")
                if "\x00" in text:
                    continue
                if path.startswith(f"{self.paths.summaries_dir}/"):
                    text = _without_header(text)
                self._add_sections(path, text)

    def _drop(self, path: str) -> None:
        self.touch()
        ids = [i for (i,) in self.conn.execute("SELECT id FROM sections WHERE path = ?", (path,))]
        if ids:
            marks = ",".join("?" * len(ids))
            line_ids = [
                (i,)
                for (i,) in self.conn.execute(
                    f"SELECT id FROM lines WHERE section IN ({marks})", ids
                )
            ]
            self.conn.executemany("DELETE FROM lines_fts WHERE rowid = ?", line_ids)
            self.conn.execute(f"DELETE FROM lines WHERE section IN ({marks})", ids)
            self.conn.execute(f"DELETE FROM sections_fts WHERE rowid IN ({marks})", ids)
            self.conn.execute(f"DELETE FROM sections WHERE id IN ({marks})", ids)
        self.conn.execute("DELETE FROM docs WHERE path = ?", (path,))

    def _add_sections(self, path: str, text: str) -> None:
        """Insert the sections and non-blank lines of one file; their token counts are filled
        by ``_fill_lengths``."""
        for section in split_sections(path, text):
            body = section.lines[1:] if section.heading is not None else section.lines
            cur = self.conn.execute(
                "INSERT INTO sections (path, start, heading, first_line) VALUES (?, ?, ?, ?)",
                (path, section.start, section.heading, section.lines[0] if section.lines else ""),
            )
            sid = int(cur.lastrowid or 0)
            document = (sid, section.title, "\n".join(body))
            self.conn.execute(
                "INSERT INTO sections_fts (rowid, heading, body) VALUES (?, ?, ?)", document
            )
            self._new_sections.append(document)
            first_line_id, count = None, 0
            for offset, line in enumerate(section.lines):
                if not line.strip():
                    continue
                cur = self.conn.execute(
                    "INSERT INTO lines (section, line, text) VALUES (?, ?, ?)",
                    (sid, section.start + offset, line),
                )
                lid = int(cur.lastrowid or 0)
                self.conn.execute("INSERT INTO lines_fts (rowid, text) VALUES (?, ?)", (lid, line))
                self._new_lines.append((lid, line))
                first_line_id = lid if first_line_id is None else first_line_id
                count += 1
            self.conn.execute(
                "UPDATE sections SET first_line_id = ?, line_count = ? WHERE id = ?",
                (first_line_id, count, sid),
            )

    def _fill_lengths(self) -> None:
        """Token counts of the sections (heading tokens weighted) and lines added since the
        last call, for BM25: the new rows are tokenized again in scratch tables whose
        vocabularies hold only them (the main vocabularies can only be read by term)."""
        if not self._new_sections and not self._new_lines:
            return
        for statement in _SESSION_TABLES:
            self.conn.execute(statement)
        self.conn.executemany(
            "INSERT INTO temp.stage_sections (rowid, heading, body) VALUES (?, ?, ?)",
            self._new_sections,
        )
        self.conn.executemany(
            "INSERT INTO temp.stage_lines (rowid, text) VALUES (?, ?)", self._new_lines
        )
        lengths = dict.fromkeys((doc for doc, _, _ in self._new_sections), 0.0)
        for doc, column in self.conn.execute("SELECT doc, col FROM temp.stage_section_terms"):
            lengths[int(doc)] += HEADING_WEIGHT if column == "heading" else 1.0
        self.conn.executemany(
            "UPDATE sections SET length = ? WHERE id = ?", [(v, k) for k, v in lengths.items()]
        )
        line_lengths = dict.fromkeys((doc for doc, _ in self._new_lines), 0.0)
        for (doc,) in self.conn.execute("SELECT doc FROM temp.stage_line_terms"):
            line_lengths[int(doc)] += 1.0
        self.conn.executemany(
            "UPDATE lines SET length = ? WHERE id = ?", [(v, k) for k, v in line_lengths.items()]
        )
        self.conn.execute("DELETE FROM temp.stage_sections")
        self.conn.execute("DELETE FROM temp.stage_lines")
        self._new_sections, self._new_lines = [], []

    def search(self, query: str, limit: int) -> list[Hit]:
        """``search_memory``'s ranking over the indexed sections: the same hits, in the same
        order, as the full scan of the same files."""
        if limit < 1:
            raise UserError(f"the search limit must be at least 1, got {limit}")
        for statement in _SESSION_TABLES:
            self.conn.execute(statement)
        self._fill_lengths()
        terms = query_terms(self.conn, query)
        if not terms:
            return []
        total, length_sum = self.conn.execute(
            "SELECT count(*), coalesce(sum(length), 0) FROM sections"
        ).fetchone()
        if not total:
            return []
        tf: dict[int, dict[str, float]] = {}
        for term in terms:
            for doc, column in self.conn.execute(
                "SELECT doc, col FROM temp.section_terms WHERE term = ?", (term,)
            ):
                counts = tf.setdefault(int(doc), {})
                weight = HEADING_WEIGHT if column == "heading" else 1.0
                counts[term] = counts.get(term, 0.0) + weight
        frequency = {t: sum(1 for c in tf.values() if t in c) for t in terms}
        lengths = self._column("sections", "length", tf)
        scores = _bm25(terms, tf, frequency, lengths, total, length_sum)
        info = self._section_info(scores)
        ranked = sorted(scores.items(), key=lambda i: (-i[1], info[i[0]].path, info[i[0]].start))
        top = [(sid, score, info[sid]) for sid, score in ranked[:limit]]
        best = self._best_lines(terms, [section for _, _, section in top])
        hits = []
        for sid, score, section in top:
            line, text = best.get(sid, (section.start, section.first_line))
            hits.append(Hit(section.path, line, round(score, 6), _snippet(text), section.heading))
        return hits

    def _column(self, table: str, column: str, docs: Iterable[int]) -> dict[int, float]:
        ids = list(docs)
        found: dict[int, float] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for doc, value in self.conn.execute(
                f"SELECT id, {column} FROM {table} WHERE id IN ({marks})", chunk
            ):
                found[int(doc)] = float(value or 0.0)
        return found

    def _section_info(self, scores: dict[int, float]) -> dict[int, _Section]:
        info = {}
        ids = list(scores)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for row in self.conn.execute(
                "SELECT id, path, start, heading, first_line, first_line_id, line_count "
                f"FROM sections WHERE id IN ({marks})",
                chunk,
            ):
                sid, path, begin, heading, first_line, first_id, count = row
                info[int(sid)] = _Section(path, begin, heading, first_line, first_id, count, sid)
        return info

    def _best_lines(self, terms: list[str], sections: list[_Section]) -> dict[int, tuple[int, str]]:
        """Each section's best-matching line (BM25 over every indexed line), by section id."""
        owner: dict[int, int] = {}
        for section in sections:
            if section.first_line_id is not None:
                for lid in range(section.first_line_id, section.first_line_id + section.line_count):
                    owner[lid] = section.first_line_id
        if not owner:
            return {}
        total, length_sum = self.conn.execute(
            "SELECT count(*), coalesce(sum(length), 0) FROM lines"
        ).fetchone()
        tf: dict[int, dict[str, float]] = {}
        frequency: dict[str, int] = {}
        for term in terms:
            row = self.conn.execute(
                "SELECT doc FROM temp.line_rows WHERE term = ?", (term,)
            ).fetchone()
            frequency[term] = int(row[0]) if row else 0
            for (doc,) in self.conn.execute(
                "SELECT doc FROM temp.line_terms WHERE term = ?", (term,)
            ):
                if int(doc) in owner:
                    counts = tf.setdefault(int(doc), {})
                    counts[term] = counts.get(term, 0.0) + 1.0
        scores = _bm25(terms, tf, frequency, self._column("lines", "length", tf), total, length_sum)
        best: dict[int, tuple[float, int]] = {}
        for lid, score in scores.items():
            first = owner[lid]
            if first not in best or (-score, lid) < (-best[first][0], best[first][1]):
                best[first] = (score, lid)
        found: dict[int, tuple[int, str]] = {}
        by_first = {s.first_line_id: s for s in sections if s.first_line_id is not None}
        for first, (_, lid) in best.items():
            line, text = self.conn.execute(
                "SELECT line, text FROM lines WHERE id = ?", (lid,)
            ).fetchone()
            found[by_first[first].sid] = (int(line), str(text))
        return found


@dataclass(frozen=True)
class _Section:
    path: str
    start: int
    heading: str | None
    first_line: str
    first_line_id: int | None
    line_count: int
    sid: int = 0


def _bm25(
    terms: list[str],
    tf: dict[int, dict[str, float]],
    frequency: dict[str, int],
    lengths: dict[int, float],
    total: int,
    length_sum: float,
) -> dict[int, float]:
    """Okapi BM25 as ``_search._Docs.scores`` computes it, over the documents in ``tf``."""
    average = (length_sum / total) if total else 0.0
    idf = {t: math.log(1 + (total - n + 0.5) / (n + 0.5)) for t, n in frequency.items()}
    scored: dict[int, float] = {}
    for doc, counts in tf.items():
        norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths.get(doc, 0.0) / (average or 1.0))
        score = sum(
            idf[t] * counts[t] * (BM25_K1 + 1) / (counts[t] + norm) for t in terms if t in counts
        )
        if score > 0:
            scored[doc] = score
    return scored


@contextlib.asynccontextmanager
async def _exclusive(session: SandboxSession, paths: MemoryPaths) -> AsyncIterator[None]:
    """The index's own cross-process lock (``.index.lock``; not the layout's lock, so a
    reader never waits for a generation): one process refreshes the index at a time."""
    if not await session.exists(paths.memories_dir):
        yield
        return
    with no_symlinks():
        lock = f"{paths.memories_dir}/{INDEX_LOCK}"
        await make_way(session, lock)  # a planted link or FIFO is moved aside, never blocks
        async with session.lock(lock, timeout=LOCK_TIMEOUT_S):
            yield


@contextlib.asynccontextmanager
async def opened_index(
    session: SandboxSession, paths: MemoryPaths, *, search: bool = False
) -> AsyncIterator[LayoutIndex]:
    """The layout's index, refreshed against the files (``search``: the search tables too)
    and saved when it changed, under the index lock."""
    async with _exclusive(session, paths):
        index = await LayoutIndex.load(session, paths)
        try:
            await index.refresh_conversations()
            if search:
                await index.refresh_search()
                index._fill_lengths()
            await index.save()
            yield index
        finally:
            index.close()


_TABLES = ("conversations", "docs", "sections", "lines", "sections_fts", "lines_fts")


async def rebuild_index(session: SandboxSession, paths: MemoryPaths) -> IndexReport:
    """Build the layout's index from scratch (whatever the old file held) and save it."""
    async with _exclusive(session, paths):
        index = await LayoutIndex.load(session, paths)
        try:
            index.touch()
            for table in _TABLES:
                index.conn.execute(f"DELETE FROM {table}")
            await index.refresh_conversations()
            await index.refresh_search()
            index._fill_lengths()
            count = index.conn.execute("SELECT count(*) FROM conversations").fetchone()[0]
            files = index.conn.execute("SELECT count(*) FROM docs").fetchone()[0]
            sections = index.conn.execute("SELECT count(*) FROM sections").fetchone()[0]
            await index.save()
            if index.fd is not None:
                index.conn.execute("VACUUM")
                size = os.fstat(index.fd).st_size
            else:
                size = len(index.conn.serialize())
        finally:
            index.close()
    return IndexReport(
        path=index.path, conversations=count, files=files, sections=sections, bytes=size
    )


async def remove_index(session: SandboxSession, paths: MemoryPaths) -> list[str]:
    """Delete the index file (and any side file of it): ``redact-history`` calls it, since a
    search index keeps a removed text's terms in its pages and segments. The index is derived,
    so the next use builds it again from the (redacted) files. Returns the paths removed."""
    removed: list[str] = []
    async with _exclusive(session, paths):
        if not await session.is_dir(paths.memories_dir):
            return removed
        with no_symlinks():
            for name in await session.listdir(paths.memories_dir):
                if name == INDEX_NAME or name.startswith(f"{INDEX_NAME}-"):
                    path = f"{paths.memories_dir}/{name}"
                    await session.remove(path)
                    removed.append(path)
    return removed
