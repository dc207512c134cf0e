"""The layout index: a derived SQLite file that makes looking at memory cost what changed.

``<memories_dir>/.index.sqlite`` caches what the views would otherwise read from every file on
every call: per conversation, its rollout file's fingerprint, first user message and start
time, and whether its raw memory is up to date and which rollout summary it names; the
entries of ``generation_state.json``; a summary of ``generation_log.jsonl`` (tokens per phase,
the last consolidation run); and the search sections (``_search``) of ``MEMORY.md``, the
rollout summaries and the skills.

It is never the source of truth. Each row carries the size and modification time of the
files it was derived from; every use first lists the directories it needs (one ``ls`` per
directory: names, sizes and mtimes, nothing read) and derives again exactly the rows whose
files differ, appeared or went away. So a crash between a file write and the index update,
a write by another process, an edit by hand or a deleted or corrupt index file cost a re-read
of what differs, never a wrong answer. A row whose file was modified less than ``RACY_NS``
before it was derived is stored as unsure and derived again next time (a file rewritten
twice within one timestamp tick, with the same size, would otherwise look unchanged). A
backend that reports no mtime (``InMemorySandboxSession``) gets no trusted rows: it is
re-derived on every call, correctly but without the speed. The log is append-only: when it
grew and its old end is unchanged, only the new lines are read.

The file is reached only through the memory file access layer (``memory/_files``), like every
other file of a layout: no link is followed, a special file is refused. On a backend with host
files SQLite works on the file itself, held open by descriptor (``_files.open_host``), reading
only the pages a query needs; elsewhere the database lives in memory (``sqlite3.deserialize``)
and is written back whole with ``_files.write`` (atomic) only when something changed. A hidden
file, it is left out of listings, store sync, the redaction pass and ``sandmem memory tree``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from sandmem._errors import SandboxError, UserError
from sandmem._items import content_text
from sandmem.memory import _files
from sandmem.memory import state as gen_state
from sandmem.memory._results import ConversationInfo, IndexReport, SearchHit
from sandmem.memory.layout import (
    INDEX_DB,
    INDEX_LOCK,
    MAX_DEPTH,
    RACY_NS,
    SUMMARIES_DIR,
    MemoryPaths,
    Stat,
    fingerprint,
    is_up_to_date,
    list_files,
    listing_digest,
    make_way,
    parse_header,
    read_isolated,
)
from sandmem.memory.recording import rollout_id_of
from sandmem.memory.rollouts import parse_segment
from sandmem.memory.state import RolloutState, RolloutStatus
from sandmem.memory.views import _index_check, _index_search, _search, _transcripts, _vectors
from sandmem.memory.views._index_search import QUICK_DIRS, _matches, _stat_each, _trusted
from sandmem.sandboxes._session import SandboxSession
from sandmem.sandboxes._types import EntryKind

logger = logging.getLogger("sandmem.memory")

T = TypeVar("T")

INDEX_NAME = INDEX_DB
#: how long a reader waits for another process refreshing the index
#: bump when the schema or what a row holds changes: an index of another version is rebuilt
INDEX_VERSION = 7
#: a conversation's task is cut to this many characters
TASK_CHARS = 120
#: files read at once while deriving rows
_READ_BATCH = 64
#: bytes before the log's indexed end that must be unchanged for only the new lines to be read
_LOG_TAIL = 256

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value)",
    """CREATE TABLE conversations (
        rid TEXT PRIMARY KEY, file_size INTEGER, file_mtime INTEGER, raw_size INTEGER,
        raw_mtime INTEGER, segments INTEGER, updated_at TEXT, terminal_state TEXT,
        started_at TEXT, task TEXT, up_to_date INTEGER, raw_present INTEGER,
        summary_name TEXT)""",
    "CREATE INDEX conversations_updated ON conversations (updated_at DESC, rid)",
    """CREATE TABLE states (
        rid TEXT PRIMARY KEY, status TEXT, segments INTEGER, updated_at TEXT, entry TEXT)""",
    "CREATE TABLE docs (path TEXT PRIMARY KEY, size INTEGER, mtime INTEGER)",
)
#: the tables a rebuild empties
_TABLES = (
    "conversations",
    "states",
    "docs",
    "sections",
    "sections_fts",
    *_transcripts.TABLES,
    *_vectors.TABLES,
)


@dataclass(frozen=True)
class Conversation:
    """What the index knows of one conversation's files."""

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
    """The regular, visible files of a layout's directories, each ``(size, mtime_ns)``
    (only the directories a call listed), and the listed directories holding a visible
    subdirectory (``nested``)."""

    memories: dict[str, Stat] = field(default_factory=dict)
    sessions: dict[str, Stat] = field(default_factory=dict)
    raw: dict[str, Stat] = field(default_factory=dict)
    summaries: dict[str, Stat] = field(default_factory=dict)
    skills: dict[str, Stat] = field(default_factory=dict)
    nested: set[str] = field(default_factory=set)


@dataclass
class LogSummary:
    """What the views need of ``generation_log.jsonl``: per phase (``"one"``, ``"two"``)
    the runs, failed runs, requests and tokens, and the last consolidation's record."""

    totals: dict[str, dict[str, int]] = field(
        default_factory=lambda: {
            phase: dict.fromkeys(
                ("runs", "failed_runs", "requests", "input_tokens", "output_tokens"), 0
            )
            for phase in ("one", "two")
        }
    )
    last_two: dict[str, Any] | None = None

    def add(self, record: dict[str, Any]) -> None:
        bucket = self.totals.get(str(record.get("phase")))
        if bucket is None:
            return
        bucket["runs"] += 1
        bucket["failed_runs"] += record.get("status") in ("failed", "pending")
        for key in ("requests", "input_tokens", "output_tokens"):
            value = record.get(key)
            bucket[key] += value if isinstance(value, int) and not isinstance(value, bool) else 0
        if record.get("phase") == "two":
            self.last_two = record


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


#: how long a search trusts the mtime of a search tier's large directory to show every
#: change in it (``_index_search.QUICK_DIRS``; listed again when the mtime moved, after this
#: time, or when another part of the call needs it): a file created, removed, renamed or
#: replaced moves it at once, and so does an append through the file access layer
#: (``_files.append``); an edit in place by another program moves only the file's own mtime,
#: which the full listing made at least this often sees
FULL_CHECK_S = 10.0

#: what each part of a call needs listed
_NEEDS = {
    "conversations": ("memories", "sessions", "raw", "summaries"),
    "rollouts": ("memories", "sessions"),
    "sizes": ("memories", "sessions", "raw", "summaries", "skills"),
    "search": ("memories", "summaries", "skills"),
    "transcripts": ("sessions",),
}


async def list_layout(
    session: SandboxSession,
    paths: MemoryPaths,
    parts: Iterable[str] = ("sizes",),
    skip: Iterable[str] = (),
) -> Listing:
    """One ``ls`` per directory the ``parts`` need (skills/ recursively), but those named in
    ``skip`` (``Listing`` field names)."""
    wanted = {name for part in parts for name in _NEEDS[part]} - set(skip)
    listing = Listing()
    for name in wanted:
        await list_into(session, paths, listing, name)
    return listing


async def list_into(
    session: SandboxSession, paths: MemoryPaths, listing: Listing, name: str
) -> None:
    """List one directory of the layout (a ``Listing`` field name) into ``listing``."""
    top, depth = {
        "memories": (paths.memories_dir, 0),
        "sessions": (paths.sessions_dir, MAX_DEPTH),
        "raw": (paths.raw_dir, MAX_DEPTH),
        "summaries": (paths.summaries_dir, MAX_DEPTH),
        "skills": (paths.skills_dir, MAX_DEPTH),
    }[name]
    subdirs: list[str] = []
    setattr(listing, name, await list_files(session, top, depth, subdirs))
    if subdirs:
        listing.nested.add(name)


def _tables(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)
    _search.create_tables(conn)
    _transcripts.create_tables(conn)
    _vectors.create_tables(conn)


@functools.cache
def _expected_schema() -> frozenset[Any]:
    return _index_check.expected_schema(_tables)


def _create(conn: sqlite3.Connection) -> None:
    try:
        _tables(conn)
    except (sqlite3.OperationalError, UserError) as exc:
        conn.close()
        raise UserError(
            f"the memory index needs SQLite with FTS5, which this Python's sqlite3 lacks "
            f"({exc}); use a Python build whose SQLite has FTS5 enabled"
        ) from exc
    conn.execute("INSERT INTO meta VALUES ('dirty', 0)")
    conn.execute(f"PRAGMA user_version = {INDEX_VERSION}")
    conn.commit()


def _usable(conn: sqlite3.Connection) -> bool:
    """An index of this version, with exactly this version's schema and well-typed meta
    values (``_index_check``), that was not left half-updated by a crash."""
    try:
        _guard(conn)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != INDEX_VERSION:
            return False
        problem = _index_check.schema_ok(conn, _expected_schema()) or _index_check.meta_ok(conn)
        if problem is not None:
            logger.warning("memory index failed its check (%s): rebuilding it", problem)
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


def _guard(conn: sqlite3.Connection) -> None:
    """No function runs from the file's schema (``trusted_schema``), and deleted rows are
    overwritten, not left in free pages (``secure_delete``: ``forget`` and ``redact-history``
    rely on it)."""
    conn.execute("PRAGMA trusted_schema = OFF")
    conn.execute("PRAGMA secure_delete = ON")


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
    _guard(conn)
    _create(conn)
    return conn


def _open_file(file: _files.HostFile) -> sqlite3.Connection:
    """The index in the open ``file`` (the file the file access layer checked, whatever the
    path names now). An unusable file is truncated and built again. The rollback journal
    stays in memory (no side file is created by name); a crash mid-update is caught by the
    ``dirty`` mark."""
    conn = _file_connection(file)
    try:
        if file.size() and _usable(conn):
            return conn
    except sqlite3.DatabaseError as exc:
        logger.warning("memory index unreadable (%s): rebuilding it", exc)
    conn.close()
    file.truncate()
    conn = _file_connection(file)
    _create(conn)
    return conn


def _file_connection(file: _files.HostFile) -> sqlite3.Connection:
    conn = file.connect_sqlite()
    try:
        _guard(conn)
        conn.execute("PRAGMA journal_mode = MEMORY")
        conn.execute("PRAGMA synchronous = FULL")
    except sqlite3.DatabaseError:
        if file.size() == 0:
            conn.close()
            raise
        conn.close()
        file.truncate()  # not a database: start it again
        return _file_connection(file)
    return conn


class LayoutIndex:
    """The index of one layout: ``refresh_*`` bring parts of it in line with the files,
    ``save`` commits (or writes back) what changed, ``close`` releases it.

    On a backend with host files an update marks the index ``dirty`` (and syncs) before its
    first change and clears the mark after the last, so an index a crash left half-updated
    is rebuilt, never trusted."""

    def __init__(
        self,
        session: SandboxSession,
        paths: MemoryPaths,
        conn: sqlite3.Connection,
        file: _files.HostFile | None = None,
        *,
        keep: bool = True,
    ) -> None:
        self.session = session
        #: ``False``: an index for this call only (nowhere safe to keep it)
        self.keep = keep
        self.paths = paths
        self.conn = conn
        #: the index file held open, when SQLite works on it (else the index is in memory)
        self.file = file
        self.listing = Listing()
        #: whether the last ``refresh`` listed the raw memories (else ``checked`` does)
        self.raw_listed = False
        #: the digests of this call's listings (``None``: a file too new to trust)
        self.digests: dict[str, str | None] = {}
        self.changed = False
        #: rows of a search tier were dropped: vectors no row holds go at the refresh's end
        self.vectors_dropped = False
        #: the ranking of the last ``search_hits``
        self.ranking: _vectors.Mode = "bm25"
        #: the passages ``redact-history`` withheld, by conversation (``_index_search``)
        self.withheld: dict[str, frozenset[str]] = {}
        #: when the last ``refresh`` started; the mtimes of the search tiers' large
        #: directories it found, and the tiers whose directory it did not list (``_quick``)
        self.started_ns = 0
        self.stamps: dict[str, int | None] = {}
        self.quick: set[str] = set()
        #: how many passages hold each term, as asked by this call's search
        #: (``_transcripts.doc_counts``)
        self.passage_df: dict[str, int] = {}
        _search.scratch(conn)
        _transcripts.scratch(conn)
        _vectors.scratch(conn)

    @property
    def path(self) -> str:
        return f"{self.paths.memories_dir}/{INDEX_NAME}"

    @classmethod
    async def load(cls, session: SandboxSession, paths: MemoryPaths) -> LayoutIndex:
        path = f"{paths.memories_dir}/{INDEX_NAME}"
        if not await _files.exists(session, paths.memories_dir):
            return cls(session, paths, _connect(None), keep=False)  # nowhere to keep it
        try:
            file = await _files.open_host(session, path)
        except SandboxError as exc:  # a symlink or special file planted there
            logger.warning("memory index %s not used: %s", path, exc)
            return cls(session, paths, _connect(None), keep=False)
        if file is not None:
            try:
                conn = _open_file(file)
            except BaseException:
                file.close()
                raise
            return cls(session, paths, conn, file)
        try:
            found, _bad = await read_isolated(session, [path])
            data = found.get(path)
        except SandboxError:
            data = None
        return cls(session, paths, _connect(data))

    def will_change(self) -> None:
        """Called before each change: the first one marks a file index ``dirty``, synced
        before any row changes."""
        if not self.changed and self.file is not None:
            self.conn.execute("UPDATE meta SET value = 1 WHERE key = 'dirty'")
            self.conn.commit()
        self.changed = True

    async def save(self) -> None:
        """Commit what changed; a failed write is logged and forgotten: the next reader
        derives again what it lacks."""
        if not self.changed or not self.keep:
            return
        if self.file is not None:
            self.conn.commit()
            self.conn.execute("UPDATE meta SET value = 0 WHERE key = 'dirty'")
            self.conn.commit()
            self.changed = False
            return
        self.conn.commit()
        data = self.conn.serialize()
        try:
            if await _files.exists(self.session, self.paths.memories_dir):
                await _files.write(self.session, self.path, data)
            self.changed = False
        except SandboxError as exc:
            logger.warning("could not write the memory index %s: %s", self.path, exc)

    def close(self) -> None:
        self.conn.close()
        if self.file is not None:  # after SQLite let go: closing it drops the process's locks
            self.file.close()
            self.file = None

    async def refresh(self, parts: Iterable[str]) -> None:
        """List what ``parts`` need and bring those rows in line with the files:
        ``"conversations"`` (rollout files and raw memories), ``"rollouts"`` (rollout files
        only: ``checked`` verifies the raw memories of the rows a caller shows), ``"sizes"``
        (every directory listed), ``"search"`` and ``"transcripts"`` (the search tiers: the
        large directory of a tier that passes its quick check is not listed, ``_quick``)."""
        parts = set(parts)
        self.started_ns = time.time_ns()
        self.stamps = await _quick_stamps(self.session, self.paths, parts)
        self.quick = {tier for tier, stamp in self.stamps.items() if self._quick(tier, stamp)}
        skip = {QUICK_DIRS[tier] for tier in self.quick}
        self.listing = await list_layout(self.session, self.paths, parts, skip)
        self.raw_listed = "conversations" in parts or "sizes" in parts
        if "conversations" in parts or "rollouts" in parts:
            await self._refresh_conversations()
            await self._refresh_states()
        if "search" in parts:
            await self._refresh_search()
        if "transcripts" in parts:
            await self._refresh_transcripts()
        _index_search.collect_vectors(self)

    async def list_dir(self, name: str) -> None:
        """List one more directory of the layout (a ``Listing`` field name) into this call's
        listing: a tier whose quick check passed needs it after all."""
        await list_into(self.session, self.paths, self.listing, name)

    def _quick(self, tier: str, stamp: int | None) -> bool:
        """Whether ``tier``'s large directory needs no listing: its mtime (``stamp``) is the
        one kept when the tier was last brought in line with a full listing of it, that
        listing is less than ``FULL_CHECK_S`` old, the tier's digest is still the one it
        gave, and the directory held no subdirectory (whose changes would not move it)."""
        kept = self._meta(f"{tier}_quick")
        return (
            stamp is not None
            and isinstance(kept, dict)
            and kept.get("stamp") == stamp
            and kept.get("digest") is not None
            and kept.get("digest") == self._meta(f"{tier}_digest")
            and 0 <= self.started_ns - int(kept.get("at", 0)) < FULL_CHECK_S * 1e9
        )

    def keep_quick(self, tier: str, digest: str | None, small: str | None = None) -> None:
        """After ``tier`` was brought in line with a full listing of its large directory:
        keep what its next quick check compares (nothing when the directory's mtime is too
        new to trust, it has a subdirectory, or the tier's digest could not be kept)."""
        stamp = self.stamps.get(tier)
        nested = QUICK_DIRS[tier] in self.listing.nested
        if stamp is None or digest is None or nested or stamp > self.started_ns - RACY_NS:
            if self._meta(f"{tier}_quick") is not None:
                self.will_change()
                self.conn.execute("DELETE FROM meta WHERE key = ?", (f"{tier}_quick",))
            return
        value = {"stamp": stamp, "digest": digest, "small": small, "at": self.started_ns}
        self._set_meta(f"{tier}_quick", value)

    def _unchanged(self, key: str, *listings: dict[str, Stat]) -> tuple[bool, str | None]:
        """Whether ``listings`` are exactly what they were when ``key``'s rows were last
        brought in line with them (their digest is stored under ``key``), and the digest to
        store once they are (``None`` while a file is too new to trust: see ``RACY_NS``)."""
        value = listing_digest(
            ((path, size, mtime) for path, (size, mtime) in entries.items()) for entries in listings
        )
        self.digests[key] = value
        return value is not None and self._meta(key) == value, value

    # ------------------------------------------------------------ meta

    def _meta(self, key: str) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if row is None or row[0] is None:
            return None
        try:
            return json.loads(row[0])
        except ValueError:
            return None

    def _set_meta(self, key: str, value: Any) -> None:
        self.will_change()
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    # ------------------------------------------------------------ conversations

    async def _refresh_conversations(self) -> None:
        """Derive again every conversation whose rollout file (or raw memory, when listed)
        differs from its row."""
        raw_listed = self.raw_listed
        listings = (
            (self.listing.sessions, self.listing.raw) if raw_listed else (self.listing.sessions,)
        )
        key = "conversations_digest" if raw_listed else "rollouts_digest"
        unchanged, digest = self._unchanged(key, *listings)
        if unchanged:
            return
        started_ns = time.time_ns()
        rows = {
            rid: (fs, fm, rs, rm)
            for rid, fs, fm, rs, rm in self.conn.execute(
                "SELECT rid, file_size, file_mtime, raw_size, raw_mtime FROM conversations"
            )
        }
        current: dict[str, tuple[Stat, Stat | None]] = {}
        prefix = f"{self.paths.sessions_dir}/"
        raw_prefix = f"{self.paths.raw_dir}/"
        raw = self.listing.raw
        stale = []
        for path, stat in self.listing.sessions.items():
            name = path[len(prefix) :]
            rid = rollout_id_of(name)
            if rid is None:
                continue
            raw_stat = raw.get(f"{raw_prefix}{rid}.md") if raw_listed else None
            current[rid] = (stat, raw_stat)
            row = rows.get(rid)
            if row is None:
                stale.append(rid)
            elif row[1] is None or (row[0], row[1]) != stat:
                stale.append(rid)
            elif raw_listed and not _matches((row[2], row[3]), raw_stat):
                stale.append(rid)
        gone = [rid for rid in rows if rid not in current]
        if gone:
            self.will_change()
            self.conn.executemany("DELETE FROM conversations WHERE rid = ?", [(r,) for r in gone])
        stale.sort()
        for start in range(0, len(stale), _READ_BATCH):
            await self._derive(stale[start : start + _READ_BATCH], current, started_ns)
        if digest is not None:
            self._set_meta(key, digest)

    async def _derive(
        self,
        batch: list[str],
        current: dict[str, tuple[Stat, Stat | None]],
        started_ns: int,
    ) -> None:
        files = [self.paths.rollout_file(r) for r in batch]
        raw_files = [self.paths.raw_memory_file(r) for r in batch]
        rollouts, _bad = await read_isolated(self.session, files)
        raws, _bad_raw = await read_isolated(self.session, raw_files)
        self.will_change()
        for rid, path, raw_path in zip(batch, files, raw_files, strict=True):
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
                    int(is_up_to_date(raw, fp)),
                    int(raw is not None),
                    summary_name(raw),
                ),
            )

    async def summary_names(self, ids: list[str]) -> dict[str, str]:
        """The ``rollout_summaries/...`` file each of ``ids`` points to, read from its raw
        memory now: for conversations a search found before any listing derived their row."""
        files = [self.paths.raw_memory_file(rid) for rid in ids]
        found, _bad = await read_isolated(self.session, files)
        named = {}
        for rid, path in zip(ids, files, strict=True):
            data = found.get(path)
            name = summary_name(data.decode("utf-8", "replace")) if data is not None else None
            if name:
                named[rid] = name
        return named

    def conversations(
        self, limit: int | None = None, offset: int = 0, ids: Iterable[str] | None = None
    ) -> list[Conversation]:
        """The indexed conversations (only ``ids`` when given), most recently updated first
        (then by id): ``limit`` of them (all when ``None``) after the first ``offset``."""
        columns = (
            "SELECT rid, segments, updated_at, terminal_state, started_at, task, up_to_date, "
            "raw_present, summary_name FROM conversations"
        )
        order = "ORDER BY updated_at DESC, rid LIMIT ? OFFSET ?"
        page = (-1 if limit is None else limit, offset)
        if ids is None:
            rows = self.conn.execute(f"{columns} {order}", page)
        else:
            self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS wanted (rid TEXT PRIMARY KEY)")
            self.conn.execute("DELETE FROM temp.wanted")
            self.conn.executemany(
                "INSERT OR IGNORE INTO temp.wanted VALUES (?)", ((i,) for i in ids)
            )
            rows = self.conn.execute(
                f"{columns} WHERE rid IN (SELECT rid FROM temp.wanted) {order}", page
            )
        return [
            Conversation(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), bool(r[7]), r[8])
            for r in rows
        ]

    def count(self) -> int:
        """How many conversations are indexed."""
        return int(self.conn.execute("SELECT count(*) FROM conversations").fetchone()[0])

    # ------------------------------------------------------------ generation state

    async def _refresh_states(self) -> None:
        """Load ``generation_state.json`` into ``states`` when it differs from the copy."""
        started_ns = time.time_ns()
        stat = self.listing.memories.get(self.paths.state_json)
        stored = self._meta("state_stat")
        if stored is not None and _matches(tuple(stored), stat):
            return
        state, _problems = await gen_state.load(self.session, self.paths)
        self.will_change()
        self.conn.execute("DELETE FROM states")
        self.conn.executemany(
            "INSERT INTO states VALUES (?, ?, ?, ?, ?)",
            [
                (rid, e.status, e.segments, e.updated_at, e.model_dump_json())
                for rid, e in state.rollouts.items()
            ],
        )
        self._set_meta("phase_two", state.phase_two.model_dump(mode="json"))
        self._set_meta("state_stat", list(_trusted(stat, started_ns)))

    def cached(self, name: str, compute: Callable[[], T]) -> T:
        """``compute()``, kept with the digest of the listings the conversation rows were
        checked against (computed again when they changed or a file is too new to trust).
        ``compute`` derives its value from the rows and listings only, as JSON data."""
        key = self.digests.get("conversations_digest")
        stored = self._meta(f"cache:{name}")
        if key is not None and stored is not None and stored["key"] == key:
            return cast(T, stored["value"])
        value = compute()
        if key is not None:
            self._set_meta(f"cache:{name}", {"key": key, "value": value})
        return value

    def phase_two(self) -> gen_state.PhaseTwoState:
        """The last consolidation's state (from the copy of ``generation_state.json``)."""
        return gen_state.PhaseTwoState.model_validate(self._meta("phase_two") or {})

    def status_counts(self) -> tuple[dict[str, int], list[str]]:
        """How many conversations are in each status, and the ids of the pending and failed
        ones. Kept with the digest of the listings and the state file it was computed from,
        so an unchanged layout of 10,000 conversations costs no row reads."""
        state_stat = self._meta("state_stat")
        key = [self.digests.get("conversations_digest"), state_stat]
        trusted = key[0] is not None and state_stat is not None and state_stat[1] is not None
        cached = self._meta("status_counts")
        if trusted and cached is not None and cached["key"] == key:
            return cached["counts"], cached["attention"]
        counts = dict.fromkeys(("done", "pending", "failed", "skipped"), 0)
        attention = []
        for rid, value in self.statuses().items():
            counts[value] += 1
            if value in ("pending", "failed"):
                attention.append(rid)
        if trusted:
            self._set_meta("status_counts", {"key": key, "counts": counts, "attention": attention})
        return counts, attention

    def statuses(self) -> dict[str, RolloutStatus]:
        """Every indexed conversation's status (``state.status_of`` its state entry)."""
        found: dict[str, RolloutStatus] = {}
        status_of = gen_state.status_of
        for (
            rid,
            up_to_date,
            segments,
            updated_at,
            status,
            s_segments,
            s_updated,
        ) in self.conn.execute(
            "SELECT c.rid, c.up_to_date, c.segments, c.updated_at, s.status, s.segments, "
            "s.updated_at FROM conversations AS c LEFT JOIN states AS s ON s.rid = c.rid"
        ):
            same = s_segments == segments and s_updated == updated_at
            found[rid] = status_of(status, same, bool(up_to_date))
        return found

    async def checked(self, rows: list[Conversation]) -> list[Conversation]:
        """``rows`` with their raw memories checked against the files when the raw directory
        was not listed (``"rollouts"``): a row whose raw memory changed is derived again.
        Also notes the rows' rollout summaries that exist, for ``infos``."""
        if self.raw_listed or not rows:
            return rows
        started_ns = time.time_ns()
        ids = [row.rollout_id for row in rows]
        raw_files = {rid: self.paths.raw_memory_file(rid) for rid in ids}
        stats = await _stat_each(self.session, list(raw_files.values()))
        stored = self._rows_of("SELECT rid, raw_size, raw_mtime FROM conversations", ids)
        prefix = f"{self.paths.sessions_dir}/"
        current: dict[str, tuple[Stat, Stat | None]] = {}
        for rid in ids:
            raw_stat = stats.get(raw_files[rid])
            if not _matches(tuple(stored.get(rid, (None, None))), raw_stat):
                current[rid] = (self.listing.sessions[f"{prefix}{rid}.jsonl"], raw_stat)
        if current:
            await self._derive(sorted(current), current, started_ns)
            fresh = {row.rollout_id: row for row in self.conversations(ids=current)}
            rows = [fresh.get(row.rollout_id, row) for row in rows]
        names = {
            f"{self.paths.memories_dir}/{row.summary_name}": row for row in rows if row.summary_name
        }
        found = await _stat_each(self.session, list(names))
        self.listing.summaries.update({p: s for p, s in found.items() if s is not None})
        return rows

    def _rows_of(self, select: str, ids: list[str]) -> dict[str, tuple[Any, ...]]:
        rows = _search.rows_in(self.conn, select + " WHERE rid IN ({marks})", ids)
        return {row[0]: tuple(row[1:]) for row in rows}

    def infos(self, rows: list[Conversation]) -> list[ConversationInfo]:
        """The public rows of ``rows``: their state entries reconciled with their files."""
        entries: dict[str, RolloutState] = {}
        ids = [row.rollout_id for row in rows]
        sql = "SELECT rid, entry FROM states WHERE rid IN ({marks})"
        for rid, entry in _search.rows_in(self.conn, sql, ids):
            entries[rid] = RolloutState.model_validate_json(entry)
        summaries = self.listing.summaries
        return [_info(self.paths, row, entries.get(row.rollout_id), summaries) for row in rows]

    # ------------------------------------------------------------ the log

    async def log_summary(self) -> LogSummary:
        """``generation_log.jsonl`` summarised (reading only the lines added since the
        summary was stored, when the file only grew)."""
        stat = self.listing.memories.get(self.paths.log_jsonl)
        stored = self._meta("log")
        if stat is None:
            return LogSummary()
        if stored is not None and _matches(tuple(stored["stat"]), stat):
            return LogSummary(stored["totals"], stored["last_two"])
        started_ns = time.time_ns()
        try:
            data = await _files.read(self.session, self.paths.log_jsonl)
        except SandboxError:
            return LogSummary()
        data = data or b""
        summary, offset = LogSummary(), 0
        if stored is not None:
            end = int(stored["end"])
            if len(data) >= end and data[max(0, end - _LOG_TAIL) : end].hex() == stored["tail"]:
                summary, offset = LogSummary(stored["totals"], stored["last_two"]), end
        end = max(data.rfind(b"\n") + 1, offset)  # a last line not yet ended waits
        for record in gen_state.parse_log(data[offset:end]):
            summary.add(record)
        whole = end == len(data) == stat[0]
        self._set_meta(
            "log",
            {
                "stat": list(_trusted(stat, started_ns)) if whole else [None, None],
                "end": end,
                "tail": data[max(0, end - _LOG_TAIL) : end].hex(),
                "totals": summary.totals,
                "last_two": summary.last_two,
            },
        )
        for record in gen_state.parse_log(data[end:]):
            summary.add(record)
        return summary

    # ------------------------------------------------------------ search

    async def _refresh_search(self) -> None:
        await _index_search.refresh_search(self)

    async def _refresh_transcripts(self) -> None:
        await _index_search.refresh_transcripts(self)

    def search(self, query: str, limit: int) -> list[_search.Hit]:
        """``search_memory``'s ranking over the indexed sections: the same hits, in the same
        order, as the full scan of the same files (the same tables and query)."""
        return _index_search.rank_memory(self, query, limit)

    async def search_hits(
        self, query: str, limit: int, *, transcripts: bool = True
    ) -> list[SearchHit]:
        """The public hits of one search (``_index_search.search_hits``; ``ranking`` says
        which ranking made them)."""
        return await _index_search.search_hits(self, query, limit, transcripts=transcripts)


async def _quick_stamps(
    session: SandboxSession, paths: MemoryPaths, parts: set[str]
) -> dict[str, int | None]:
    """The mtime of the large directory of each search tier in ``parts`` that may skip its
    listing (none when another part needs the directories listed), from one listing of its
    parent; ``None``: missing, not a directory, or no mtime."""
    if not parts or not parts <= set(QUICK_DIRS):
        return {}
    tops = {"summaries": paths.summaries_dir, "sessions": paths.sessions_dir}
    stamps: dict[str, int | None] = {}
    for tier in sorted(parts):
        parent, _, name = tops[QUICK_DIRS[tier]].rpartition("/")
        try:
            listed = await _files.stat_dir(session, parent or ".")
        except SandboxError:
            listed = []
        found = [m for n, kind, _, m in listed if n == name and kind == EntryKind.DIRECTORY]
        stamps[tier] = found[0] if found else None
    return stamps


def _info(
    paths: MemoryPaths,
    row: Conversation,
    entry: RolloutState | None,
    summaries: dict[str, Stat],
) -> ConversationInfo:
    entry = gen_state.reconcile(entry, row.segments, row.updated_at, row.up_to_date)
    name = row.summary_name
    summary = f"{paths.memories_dir}/{name}" if name is not None else None
    return ConversationInfo(
        rollout_id=row.rollout_id,
        status=entry.status,
        attempts=entry.attempts,
        failure_kind=entry.failure_kind if entry.status != "done" else None,
        next_retry_at=entry.next_retry_at if entry.status == "pending" else None,
        last_error=entry.last_error,
        last_attempt_at=entry.last_attempt_at,
        segments=row.segments,
        started_at=row.started_at,
        updated_at=row.updated_at,
        terminal_state=row.terminal_state,
        task=row.task,
        summary_file=summary if summary in summaries else None,
        raw_memory_file=paths.raw_memory_file(row.rollout_id) if row.raw_present else None,
    )


@contextlib.asynccontextmanager
async def _exclusive(session: SandboxSession, paths: MemoryPaths) -> AsyncIterator[None]:
    """The index's own cross-process lock (``.index.lock``; not the layout's lock, so a
    reader never waits for a generation): one process refreshes the index at a time."""
    if not await _files.exists(session, paths.memories_dir):
        yield
        return
    lock = f"{paths.memories_dir}/{INDEX_LOCK}"
    await make_way(session, lock)  # a planted link or FIFO is moved aside, never blocks
    async with _files.lock(session, lock):
        yield


@contextlib.asynccontextmanager
async def opened_index(
    session: SandboxSession, paths: MemoryPaths, *parts: str
) -> AsyncIterator[LayoutIndex]:
    """The layout's index under the index lock, refreshed for ``parts`` (default
    ``"conversations"``; ``"sizes"``: every directory listed; ``"search"``: the search
    tables) and saved when it changed (also after the caller's use, which may add cached
    summaries)."""
    async with _exclusive(session, paths):
        index = await LayoutIndex.load(session, paths)
        try:
            await index.refresh(parts or ("conversations",))
            yield index
        finally:
            try:
                await index.save()
            finally:
                index.close()


async def rebuild_index(session: SandboxSession, paths: MemoryPaths) -> IndexReport:
    """Build the layout's index from scratch (whatever the old file held) and save it."""
    async with _exclusive(session, paths):
        index = await LayoutIndex.load(session, paths)
        try:
            index.will_change()
            for table in _TABLES:
                index.conn.execute(f"DELETE FROM {table}")
            _transcripts.empty_fts(index.conn)
            index.conn.execute("DELETE FROM meta WHERE key != 'dirty'")
            await index.refresh(("conversations", "sizes", "search", "transcripts"))
            embedder = _vectors.load()
            if embedder is not None:  # every row gets its vector now, however long it takes
                await _index_search.refresh_vectors(index, embedder, None)
            await index.log_summary()
            count = index.conn.execute("SELECT count(*) FROM conversations").fetchone()[0]
            files = index.conn.execute("SELECT count(*) FROM docs").fetchone()[0]
            sections = index.conn.execute("SELECT count(*) FROM sections").fetchone()[0]
            await index.save()
            if index.file is not None:
                index.conn.execute("VACUUM")
                size = index.file.size()
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
        if not await _files.is_dir(session, paths.memories_dir):
            return removed
        for name in await _files.listdir(session, paths.memories_dir):
            if name == INDEX_NAME or name.startswith(f"{INDEX_NAME}-"):
                path = f"{paths.memories_dir}/{name}"
                await _files.remove(session, path)
                removed.append(path)
    return removed


async def purge_index(session: SandboxSession, paths: MemoryPaths) -> None:
    """Bring the index in line with the files and merge its full-text indexes, so a forgotten
    conversation's words are in no page of it (``forget`` calls it after removing the
    conversation's files)."""
    async with opened_index(session, paths, "search", "transcripts") as index:
        await _index_search.purge(index)
