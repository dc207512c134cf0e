"""The check an index file passes before the layout index (``_index``) trusts it.

``.index.sqlite`` is derived, but it is a file in the workspace: anything that can write there
(an agent's shell, a hand edit, a crash) can plant a trigger that rewrites rows as they are
inserted, a view in place of a table, an extra table, or a meta value of the wrong type. So
an index is used only when:

- its schema is exactly the one this version creates (every table, index, view and trigger in
  ``sqlite_master``, with its SQL; FTS5's own shadow tables included): ``schema_ok``;
- every ``meta`` row has a known key and a value of the type and range that key holds:
  ``meta_ok`` (``META`` says what each key holds).

An index that fails is rebuilt from the files. Rows that pass the schema can still be forged
(a planted row in the right table): ``search`` checks each hit's text against the file it
names before showing it (``_index.LayoutIndex.verified``), so no text that is in no file
reaches a snippet.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from sandmem.memory.state import PhaseTwoState

_Count = Annotated[int, Field(ge=0)]
_Stat = tuple[_Count | None, int | None]
_Digest = Annotated[str, Field(min_length=1, max_length=128)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _StatusCounts(_Strict):
    key: list[Any]
    counts: dict[str, _Count]
    attention: list[str]


class _Log(_Strict):
    stat: _Stat
    end: _Count
    tail: Annotated[str, Field(pattern=r"^[0-9a-f]*$", max_length=1024)]
    totals: dict[str, dict[str, _Count]]
    last_two: dict[str, Any] | None


class _Cached(_Strict):
    key: _Digest
    value: Any


class _Quick(_Strict):
    stamp: int
    digest: _Digest
    small: _Digest | None
    at: _Count


#: the type of each meta key's JSON value
META: dict[str, TypeAdapter[Any]] = {
    "conversations_digest": TypeAdapter(_Digest),
    "rollouts_digest": TypeAdapter(_Digest),
    "search_digest": TypeAdapter(_Digest),
    "transcripts_digest": TypeAdapter(_Digest),
    "search_quick": TypeAdapter(_Quick),
    "transcripts_quick": TypeAdapter(_Quick),
    "corpus": TypeAdapter(tuple[_Count, Annotated[float, Field(ge=0)]]),
    "phase_two": TypeAdapter(PhaseTwoState),
    "state_stat": TypeAdapter(_Stat),
    "status_counts": TypeAdapter(_StatusCounts),
    "log": TypeAdapter(_Log),
    "passages": TypeAdapter(_Count),
    "embedder": TypeAdapter(Annotated[str, Field(max_length=200)]),
    "vectors_complete": TypeAdapter(bool),
    "withheld_digest": TypeAdapter(
        Annotated[str, Field(pattern=r"^([0-9a-f]{64}|none|unreadable)$")]
    ),
    "vectors_gen": TypeAdapter(Annotated[str, Field(pattern=r"^[0-9a-f]{1,64}$")]),
}
#: keys with a name after this prefix (``cache:raw_sizes``)
_PREFIXED = {"cache:": TypeAdapter(_Cached)}


def schema_of(conn: sqlite3.Connection) -> frozenset[tuple[str, str, str, str | None]]:
    """Every object of ``conn``'s main database: ``(type, name, table, sql)``."""
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM main.sqlite_master").fetchall()
    return frozenset(
        (str(t), str(n), str(tb), None if s is None else str(s)) for t, n, tb, s in rows
    )


def expected_schema(create: Callable[[sqlite3.Connection], None]) -> frozenset[Any]:
    """The schema ``create`` makes in a fresh database."""
    conn = sqlite3.connect(":memory:")
    try:
        create(conn)
        return schema_of(conn)
    finally:
        conn.close()


def schema_ok(conn: sqlite3.Connection, expected: frozenset[Any]) -> str | None:
    """``None`` when ``conn``'s schema is ``expected``, else what differs (one line)."""
    found = schema_of(conn)
    if found == expected:
        return None
    extra = sorted(f"{t} {n}" for t, n, _, _ in found - expected)
    missing = sorted(f"{t} {n}" for t, n, _, _ in expected - found)
    return f"unexpected schema (extra: {', '.join(extra) or '-'}; missing or changed: " + (
        f"{', '.join(missing) or '-'})"
    )


def meta_ok(conn: sqlite3.Connection) -> str | None:
    """``None`` when every meta row is well typed, else the first bad key (one line)."""
    for key, value in conn.execute("SELECT key, value FROM meta"):
        if not isinstance(key, str):
            return f"a meta key of type {type(key).__name__}"
        if key == "dirty":
            if value not in (0, 1) or isinstance(value, float):
                return f"meta 'dirty' is {value!r}"
            continue
        adapter = META.get(key) or next(
            (a for prefix, a in _PREFIXED.items() if key.startswith(prefix)), None
        )
        if adapter is None:
            return f"unknown meta key {key[:40]!r}"
        if not isinstance(value, str):
            return f"meta {key[:40]!r} is not JSON text"
        try:
            adapter.validate_python(json.loads(value))
        except (ValueError, ValidationError):
            return f"meta {key[:40]!r} has a bad value"
    return None
