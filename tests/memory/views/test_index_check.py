"""A hostile ``.index.sqlite``: a planted trigger, view, extra table or index, a bad meta value,
or a forged row never breaks ``search`` or ``status`` and never puts text that is in no file
into a snippet; an index that fails its check is rebuilt. And a huge query is bounded work."""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from memory_doubles import segment_line

from sandmem import memory as api
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.views import _index_check
from sandmem.memory.views._index import INDEX_NAME, _tables
from sandmem.memory.views._search import MAX_QUERY_TERMS, _connect, query_terms

PATHS = MemoryPaths("memories", "sessions")
INJECTED = "INJECTEDTEXT"
MEMORY = "# Memory\n\n## Deploys\n- deploys need the VPN\n- the cache ttl is 300 seconds\n"


async def built(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / PATHS.sessions_dir).mkdir(parents=True)
    (root / PATHS.memories_dir).mkdir(parents=True)
    (root / PATHS.memory_md).write_text(MEMORY)
    (root / PATHS.rollout_file("r1")).write_text(segment_line("r1", "deploy the cache service"))
    await api.reindex(root)
    return root


def plant(root: Path, *statements: str) -> None:
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


def meta(key: str, value: object) -> str:
    text = value if isinstance(value, str) and key == "dirty" else json.dumps(value)
    quoted = text.replace("'", "''") if isinstance(text, str) else text
    if isinstance(text, str):
        return f"INSERT OR REPLACE INTO meta VALUES ('{key}', '{quoted}')"
    return f"INSERT OR REPLACE INTO meta VALUES ('{key}', {quoted})"


PLANTS: dict[str, tuple[str, ...]] = {
    "trigger on sections": (
        f"CREATE TRIGGER t AFTER INSERT ON sections BEGIN UPDATE sections SET first_line = "
        f"'{INJECTED}'; END",
    ),
    "trigger on passages_fts insert": (
        "CREATE TRIGGER t2 AFTER INSERT ON passages BEGIN INSERT INTO passages_fts "
        f"(rowid, body) VALUES (new.id + 100000, '{INJECTED} deploy'); END",
    ),
    "view shadowing nothing": (f"CREATE VIEW v AS SELECT '{INJECTED}' AS x",),
    "table replaced by a view": (
        "DROP TABLE docs",
        f"CREATE VIEW docs AS SELECT 'memories/MEMORY.md' AS path, 0 AS size, 0 AS mtime, "
        f"'{INJECTED}' AS x",
    ),
    "extra table": ("CREATE TABLE extra (x TEXT)",),
    "extra index": ("CREATE INDEX extra_idx ON conversations (task)",),
    "meta corpus of the wrong type": (meta("corpus", "lots"),),
    "meta corpus out of range": (meta("corpus", [-5, 1.0]),),
    "meta dirty not 0/1": ("UPDATE meta SET value = 7 WHERE key = 'dirty'",),
    "meta unknown key": (meta("surprise", 1),),
    "meta digest not a string": (meta("search_digest", {"a": 1}),),
    "meta log with a bad tail": (
        meta("log", {"stat": [1, 1], "end": 1, "tail": "zz", "totals": {}, "last_two": None}),
    ),
    "meta value not JSON": ("INSERT OR REPLACE INTO meta VALUES ('corpus', 'not json {')",),
    "meta status counts negative": (
        meta("status_counts", {"key": [], "counts": {"done": -1}, "attention": []}),
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTS))
async def test_a_planted_index_object_is_rebuilt_never_trusted(tmp_path: Path, name: str) -> None:
    root = await built(tmp_path)
    plant(root, *PLANTS[name])
    found = await api.search(root, "deploy cache")
    status = await api.status(root)
    assert status.files["MEMORY.md"].bytes == len(MEMORY)
    assert found.hits
    shown = json.dumps(found.model_dump())
    assert INJECTED not in shown
    # the index file was rebuilt: it holds exactly this version's schema again
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        assert _index_check.schema_ok(conn, _index_check.expected_schema(_tables)) is None
        assert _index_check.meta_ok(conn) is None
    finally:
        conn.close()


def block(texts: list[str]) -> bytes:
    """A transcript text block as the index stores one (``_transcripts._store_block``)."""
    return zlib.compress(json.dumps(texts).encode())


FORGED: dict[str, Callable[[sqlite3.Connection], None]] = {
    "a forged section body": lambda c: c.execute(
        "UPDATE sections_fts SET body = ? WHERE rowid IN (SELECT id FROM sections)",
        (f"- deploys {INJECTED} cache",),
    ),
    "a forged first line": lambda c: c.execute(
        "UPDATE sections SET first_line = ?", (f"## Deploys {INJECTED} cache",)
    ),
    "a forged passage": lambda c: c.execute(
        "UPDATE passage_blocks SET texts = ?", (block([f"deploy cache {INJECTED}"] * 9),)
    ),
    "a forged passage of another kind": lambda c: c.execute(
        "UPDATE passage_blocks SET texts = ?", (block([f"deploy the cache service {INJECTED}"]),)
    ),
    "a forged passage row pointing elsewhere": lambda c: c.execute(
        "UPDATE passages SET segment = 9, rid = 'r1'"
    ),
}


@pytest.mark.parametrize("name", sorted(FORGED))
async def test_a_forged_row_never_reaches_a_snippet(tmp_path: Path, name: str) -> None:
    root = await built(tmp_path)
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        FORGED[name](conn)
        conn.commit()
    finally:
        conn.close()
    first = await api.search(root, "deploy cache")
    assert INJECTED not in json.dumps(first.model_dump())
    # the mismatching rows were dropped and are derived again from the files next time
    again = await api.search(root, "deploy cache")
    assert INJECTED not in json.dumps(again.model_dump())
    assert {h.tier for h in again.hits} == {"memory", "transcript"}


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["alpha"] * 35_000, ["alpha"]),
        ([f"w{i}" for i in range(100_000)], [f"w{i}" for i in range(MAX_QUERY_TERMS)]),
        (["x"] * 100_000 + ["late"], ["x"]),  # beyond the character cap: never tokenized
        (["same", "Same", "SAME"] * 40_000, ["same"]),
    ],
)
def test_a_huge_query_is_capped(words: list[str], expected: list[str]) -> None:
    conn = _connect()
    try:
        assert query_terms(conn, " ".join(words)) == expected
    finally:
        conn.close()


@pytest.mark.parametrize("size", [35_000, 100_000])
async def test_a_huge_query_answers(tmp_path: Path, size: int) -> None:
    root = await built(tmp_path)
    words = " ".join(["deploy"] + [f"word{i}" for i in range(size)])
    found = await api.search(root, words)
    assert found.hits and found.hits[0].snippet
    assert len(found.query) > 100_000
