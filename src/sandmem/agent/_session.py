"""Conversation sessions: message history for one conversation (not memory)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

from sandmem._items import Item


@runtime_checkable
class Session(Protocol):
    """A store of conversation items. ``Runner.run(..., session=s)`` prepends the stored history
    to the run's input and stores the run's input and new items when it completes."""

    session_id: str

    async def get_items(self, limit: int | None = None) -> list[Item]: ...
    async def add_items(self, items: list[Item]) -> None: ...
    async def pop_item(self) -> Item | None: ...
    async def clear_session(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sandmem_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sandmem_items_session ON sandmem_items (session_id, id);
"""


class SQLiteSession:
    """Conversation history in SQLite: in memory by default, in a file when ``db_path`` is a
    path (the history then survives the process). Safe for concurrent use within a process:
    one connection guarded by a lock, used from worker threads."""

    def __init__(self, session_id: str, db_path: str | Path = ":memory:") -> None:
        if not isinstance(session_id, str) or not session_id.strip():
            raise ValueError("session_id must be a non-empty string")
        self.session_id = session_id
        self.db_path = str(db_path)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.db_path, check_same_thread=False, timeout=30.0)
        with self._lock:
            if self.db_path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.executescript(_SCHEMA)
            self._conn.commit()

    def _get(self, limit: int | None) -> list[Item]:
        with self._lock:
            if limit is None:
                rows = self._conn.execute(
                    "SELECT data FROM sandmem_items WHERE session_id = ? ORDER BY id",
                    (self.session_id,),
                ).fetchall()
            else:
                rows = self._conn.execute(
                    "SELECT data FROM (SELECT id, data FROM sandmem_items WHERE session_id = ?"
                    " ORDER BY id DESC LIMIT ?) ORDER BY id",
                    (self.session_id, limit),
                ).fetchall()
        return [json.loads(row[0]) for row in rows]

    def _add(self, items: list[Item]) -> None:
        payload = [(self.session_id, json.dumps(item)) for item in items]
        with self._lock:
            self._conn.executemany(
                "INSERT INTO sandmem_items (session_id, data) VALUES (?, ?)", payload
            )
            self._conn.commit()

    def _pop(self) -> Item | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT id, data FROM sandmem_items WHERE session_id = ? ORDER BY id DESC LIMIT 1",
                (self.session_id,),
            ).fetchone()
            if row is None:
                return None
            self._conn.execute("DELETE FROM sandmem_items WHERE id = ?", (row[0],))
            self._conn.commit()
        item: Item = json.loads(row[1])
        return item

    def _clear(self) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM sandmem_items WHERE session_id = ?", (self.session_id,))
            self._conn.commit()

    async def get_items(self, limit: int | None = None) -> list[Item]:
        """The stored items, oldest first (the latest ``limit`` when given)."""
        return await asyncio.to_thread(self._get, limit)

    async def add_items(self, items: list[Item]) -> None:
        if items:
            await asyncio.to_thread(self._add, list(items))

    async def pop_item(self) -> Item | None:
        """Remove and return the most recent item (``None`` when empty)."""
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        await asyncio.to_thread(self._clear)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
