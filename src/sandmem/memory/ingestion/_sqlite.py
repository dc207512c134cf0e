"""Reading conversation sessions out of a SQLite database, read-only: the OpenAI Agents SDK's
``SQLiteSession`` (tables ``agent_sessions`` and ``agent_messages``: ``id``, ``session_id``,
``message_data`` (one item as JSON), ``created_at``) and sandmem's own (``sandmem_items``)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sandmem.memory._json import loads_bounded
from sandmem.memory.ingestion._model import iso_time
from sandmem.memory.ingestion._open import open_regular

SQLITE_MAGIC = b"SQLite format 3\x00"
#: rows read per ingest of one session (the rest waits for the next ingest)
MAX_ROWS = 100_000


@contextlib.contextmanager
def _connect(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the database ``path``, opened through the descriptor that was
    checked: ``open_regular`` opens it without blocking and refuses a FIFO, socket or device,
    and SQLite is given ``/proc/self/fd/N``, which it resolves to that file's own path (so the
    WAL beside it is read too). SQLite then opens that path itself: a file swapped in at it in
    the instant between its resolution and its open is not caught (``docs/security.md``)."""
    with open_regular(path) as checked:
        fd = checked.fileno()
        uri = f"file:/proc/self/fd/{fd}"
        if not os.path.exists(f"/proc/self/fd/{fd}"):  # not Linux: the name, checked just now
            uri = path.resolve().as_uri()
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=5.0)
        try:
            with conn:
                yield conn
        finally:
            conn.close()


def _table(conn: sqlite3.Connection) -> tuple[str, str, str | None] | None:
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "agent_messages" in names:
        return "agent_messages", "message_data", "created_at"
    if "sandmem_items" in names:
        return "sandmem_items", "data", None
    return None


def session_ids(path: Path) -> list[str]:
    """The sessions a database holds, in the order they were first written."""
    with _connect(path) as conn:
        table = _table(conn)
        if table is None:
            raise ValueError(
                "no conversation tables (agent_messages or sandmem_items) in this SQLite file"
            )
        rows = conn.execute(
            f"SELECT session_id, MIN(id) AS first FROM {table[0]} GROUP BY session_id "
            "ORDER BY first"
        ).fetchall()
    return [str(r[0]) for r in rows]


def session_rows(
    path: Path, session_id: str, after_id: int
) -> tuple[list[tuple[int, str | None, Any]], int]:
    """The rows of a session after ``after_id``: ``(id, time, item or None when the row is not
    JSON)``, at most ``MAX_ROWS``; and how many rows are left after those."""
    with _connect(path) as conn:
        table = _table(conn)
        assert table is not None
        name, column, created = table
        time_column = created or "NULL"
        rows = conn.execute(
            f"SELECT id, {column}, {time_column} FROM {name} WHERE session_id = ? AND id > ? "
            "ORDER BY id LIMIT ?",
            (session_id, after_id, MAX_ROWS + 1),
        ).fetchall()
    found: list[tuple[int, str | None, Any]] = []
    for row_id, data, created_at in rows[:MAX_ROWS]:
        try:
            value = loads_bounded(data) if isinstance(data, str | bytes) else None
        except ValueError:
            value = None
        found.append((int(row_id), iso_time(created_at), value))
    return found, max(0, len(rows) - MAX_ROWS)
