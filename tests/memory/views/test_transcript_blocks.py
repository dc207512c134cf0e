"""The transcript tier keeps each passage's text once, compressed, in ``passage_blocks``; its
full-text table is contentless (terms and positions only). A passage leaves the full-text table
only when given the text it was indexed with: these tests check that dropping conversations
(forgotten, rewritten, truncated) leaves the table exactly as a fresh build of what is left,
and that a damaged or forged block never breaks search, never shows text that is in no file,
and makes the tier be indexed again from the files."""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_doubles import age, gone_and_kept
from memory_doubles import transcript_turn as turn
from memory_doubles import transcripts_workspace as workspace

from sandmem import memory as api
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.views import _index, _index_search, _search, _transcripts, _vectors
from sandmem.memory.views._index import INDEX_NAME

PATHS = MemoryPaths("memories", "sessions")
WORDS = ["cache", "deploy", "ttl", "redis", "timeout", "linter", "ruff", "vpn", "port", "the"]


def fresh_conn() -> sqlite3.Connection:
    conn = _index._connect(None)
    _search.scratch(conn)
    _transcripts.scratch(conn)
    _vectors.scratch(conn)
    return conn


def postings(conn: sqlite3.Connection) -> Counter[tuple[str, str, int, str, int, int]]:
    """Every entry of the full-text table as (term, conversation, segment, kind, part,
    offset): what a search can match, whatever the row ids."""
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.inst USING fts5vocab(main, passages_fts, "
        "'instance')"
    )
    where = {
        int(pid): (str(rid), int(seg), str(kind), int(part))
        for pid, rid, seg, kind, part in conn.execute(
            "SELECT id, rid, segment, kind, part FROM passages"
        )
    }
    found: Counter[tuple[str, str, int, str, int, int]] = Counter()
    for term, doc, offset in conn.execute("SELECT term, doc, offset FROM temp.inst"):
        assert int(doc) in where, f"term {term!r} left for a passage that is gone"
        found[(str(term), *where[int(doc)], int(offset))] += 1
    return found


def averages(conn: sqlite3.Connection) -> tuple[int, float] | None:
    return _transcripts._averages(conn)


def lines_of(texts: list[tuple[str, str]], rid: str) -> list[bytes]:
    return [turn(rid, u, a, n % 60).rstrip("\n").encode() for n, (u, a) in enumerate(texts)]


sentences = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
conversation = st.lists(st.tuples(sentences, sentences), min_size=1, max_size=6)


@given(
    convs=st.dictionaries(st.sampled_from("abcdef"), conversation, min_size=1, max_size=6),
    dropped=st.sets(st.sampled_from("abcdef")),
    block_chars=st.sampled_from([1, 40, 16_000]),
)
@settings(max_examples=25, deadline=None)
def test_dropping_conversations_leaves_what_a_fresh_build_of_the_rest_holds(
    convs: dict[str, list[tuple[str, str]]], dropped: set[str], block_chars: int
) -> None:
    old = _transcripts.BLOCK_CHARS
    _transcripts.BLOCK_CHARS = block_chars  # one passage a block, a few, or all in one
    try:
        conn, fresh = fresh_conn(), fresh_conn()
        for rid, texts in convs.items():
            _transcripts.add_lines(conn, rid, 1, lines_of(texts, rid), str)
        for rid in sorted(dropped):
            assert _transcripts.drop_conversation(conn, rid)
        for rid, texts in convs.items():
            if rid not in dropped:
                _transcripts.add_lines(fresh, rid, 1, lines_of(texts, rid), str)
        assert postings(conn) == postings(fresh)
        assert averages(conn) == averages(fresh)
        kept = [int(pid) for (pid,) in conn.execute("SELECT id FROM passages")]
        assert len(_transcripts.bodies(conn, kept)) == len(kept)  # every text reads back
        left = conn.execute("SELECT count(*) FROM passage_blocks").fetchone()[0]
        used = conn.execute("SELECT count(DISTINCT block) FROM passages").fetchone()[0]
        assert left == used  # no block of a dropped conversation is left
        assert not _transcripts.damaged(conn)
    finally:
        _transcripts.BLOCK_CHARS = old


def test_a_block_holds_many_passages_and_reads_back_each() -> None:
    conn = fresh_conn()
    texts = [
        (f"question {n} about the redis port", f"answer {n}: use port 63{n:02d}") for n in range(40)
    ]
    _transcripts.add_lines(conn, "r", 1, lines_of(texts, "r"), str)
    blocks = conn.execute("SELECT count(*) FROM passage_blocks").fetchone()[0]
    ids = [int(pid) for (pid,) in conn.execute("SELECT id FROM passages ORDER BY id")]
    assert len(ids) == 80 and blocks == 1
    read = _transcripts.bodies(conn, ids)
    assert [read[i] for i in ids[:2]] == [
        "question 0 about the redis port",
        "answer 0: use port 6300",
    ]
    # the full-text table keeps no text of its own
    assert conn.execute("SELECT body FROM passages_fts LIMIT 1").fetchone() == (None,)


def test_a_passage_redaction_made_longer_reads_back_whole() -> None:
    """A marker may be longer than the secret it replaces: an item is redacted before it is
    cut, so its passages keep to ``PASSAGE_CHARS``, no marker is cut in two, and every block
    reads back (never "damaged")."""
    conn = fresh_conn()
    texts = [("a b c " * 90, "short answer")] * 3

    def longer(text: str) -> str:
        return text.replace(" ", " [REDACTED:password] ")

    _transcripts.add_lines(conn, "r", 1, lines_of(texts, "r"), longer)
    ids = [int(pid) for (pid,) in conn.execute("SELECT id FROM passages")]
    read = _transcripts.bodies(conn, ids)
    assert len(read) == len(ids) > 3
    assert max(map(len, read.values())) <= _transcripts.PASSAGE_CHARS
    for body in read.values():
        assert body.count("[REDACTED:") == body.count("[REDACTED:password]") > 0
    assert not _transcripts.damaged(conn)
    assert _transcripts.drop_conversation(conn, "r")
    assert postings(conn) == Counter()


def test_a_block_past_its_byte_bound_is_stored_as_two(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transcripts, "BLOCK_BYTES", 300)
    conn = fresh_conn()
    texts = [(f"question {n} " + "word " * 30, f"answer {n}") for n in range(6)]
    _transcripts.add_lines(conn, "r", 1, lines_of(texts, "r"), str)
    sizes = [len(zlib.decompress(b)) for (b,) in conn.execute("SELECT texts FROM passage_blocks")]
    assert len(sizes) > 2 and max(sizes) <= 300
    ids = [int(pid) for (pid,) in conn.execute("SELECT id FROM passages ORDER BY id")]
    read = _transcripts.bodies(conn, ids)
    assert [read[i] for i in ids][:2] == [texts[0][0].strip(), "answer 0"]
    fresh = fresh_conn()
    monkeypatch.setattr(_transcripts, "BLOCK_BYTES", 1 << 20)
    _transcripts.add_lines(fresh, "r", 1, lines_of(texts, "r"), str)
    assert postings(conn) == postings(fresh)


def block(data: object) -> bytes:
    return zlib.compress(json.dumps(data).encode())


#: ways a text block can be damaged or forged in the index file
DAMAGE: dict[str, tuple[str, tuple[object, ...]]] = {
    "not zlib": ("UPDATE passage_blocks SET texts = ?", (b"\x00\x01 not a stream",)),
    "zlib, not JSON": ("UPDATE passage_blocks SET texts = ?", (zlib.compress(b"[not json"),)),
    "JSON, not a list": ("UPDATE passage_blocks SET texts = ?", (block({"a": "b"}),)),
    "a list of numbers": ("UPDATE passage_blocks SET texts = ?", (block([1, 2, 3]),)),
    "a nesting past the parser's limit": (
        "UPDATE passage_blocks SET texts = ?",
        (zlib.compress(b"[" * 200_000 + b"]" * 200_000),),
    ),
    "a list holding a list": ("UPDATE passage_blocks SET texts = ?", (block([["a"], "b"]),)),
    "a decompression bomb": (
        "UPDATE passage_blocks SET texts = ?",
        (zlib.compress(b"[" + b" " * (_transcripts.BLOCK_BYTES * 8) + b"]", 9),),
    ),
    "bytes after the stream": (
        "UPDATE passage_blocks SET texts = texts || ?",
        (b"more",),
    ),
    "text in place of bytes": ("UPDATE passage_blocks SET texts = 'hello'", ()),
    "no value": ("UPDATE passage_blocks SET texts = NULL", ()),
    "the block deleted": ("DELETE FROM passage_blocks", ()),
    "a place past the block's end": ("UPDATE passages SET n = n + 1000", ()),
    "a block id of the wrong type": ("UPDATE passages SET block = 'x'", ()),
}


async def settled(root: Path) -> None:
    """Index the layout with its files old enough to be trusted: a later search compares
    them, and indexes none again, unless told to."""
    age(root)
    await api.search(root, "settle")
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        assert all(m is not None for (m,) in conn.execute("SELECT mtime FROM transcript_files"))
    finally:
        conn.close()


def damage(root: Path, sql: str, params: tuple[object, ...]) -> None:
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        conn.execute(sql, params)
        conn.commit()
    finally:
        conn.close()


def file_postings(root: Path) -> Counter[tuple[str, str, int, str, int, int]]:
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        return postings(conn)
    finally:
        conn.close()


async def rebuilt_postings(
    root: Path, tmp_path: Path
) -> Counter[tuple[str, str, int, str, int, int]]:
    """What a fresh index of the same rollout files holds."""
    other = workspace(
        tmp_path / "other",
        {p.stem: p.read_text() for p in (root / PATHS.sessions_dir).glob("*.jsonl")},
    )
    await api.reindex(other)
    return file_postings(other)


@pytest.mark.parametrize("name", sorted(DAMAGE))
async def test_a_damaged_block_never_breaks_search_and_the_tier_is_indexed_again(
    tmp_path: Path, name: str
) -> None:
    root = workspace(
        tmp_path,
        {
            "a": turn("a", "raise the redis timeout", "done: timeout 30 s"),
            "b": turn("b", "configure the linter", "ruff configured"),
        },
    )
    await settled(root)
    damage(root, *DAMAGE[name])
    first = await api.search(root, "redis timeout")  # no error; what it shows is in a file
    for hit in first.hits:
        assert hit.text is None or hit.text in (root / hit.path).read_text()
    again = await api.search(root, "redis timeout")
    assert [h.rollout_id for h in again.hits if h.tier == "transcript"][:1] == ["a"]
    assert file_postings(root) == await rebuilt_postings(root, tmp_path)


@pytest.mark.parametrize("name", sorted(DAMAGE))
async def test_forget_after_a_damaged_block_leaves_no_term_behind(
    tmp_path: Path, name: str
) -> None:
    word = "quuxzanzibarword"
    root = gone_and_kept(tmp_path, word)
    await api.generate(root, engine="extractive")
    await settled(root)
    assert (await api.search(root, word)).hits
    damage(root, *DAMAGE[name])
    await api.forget(root, "gone", engine="extractive")
    assert (await api.search(root, word)).hits == []
    assert word.encode() not in (root / PATHS.memories_dir / INDEX_NAME).read_bytes()
    assert not any(word in term for term, *_ in file_postings(root))
    assert [
        h.rollout_id for h in (await api.search(root, "linter")).hits if h.tier == "transcript"
    ] == ["kept"]


#: changes to a rollout file under the index, each a function of the file's text
CHANGES: dict[str, Callable[[str], str]] = {
    "cut to its first segment": lambda text: text.split("\n", 1)[0] + "\n",
    "cut mid-segment": lambda text: text[: len(text) - 40],
    "a segment changed in place, same size": lambda text: text.replace("bravo", "zulu!"),
    "emptied": lambda text: "",
    "first segment rewritten": lambda text: (
        turn("a", "other words", "nothing") + text.split("\n", 1)[1]
    ),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
async def test_a_file_changed_under_the_index_leaves_none_of_its_old_terms(
    tmp_path: Path, name: str
) -> None:
    text = turn("a", "alpha first question", "alpha answer") + turn(
        "a", "second bravo question", "bravo answer", 1
    )
    root = workspace(tmp_path, {"a": text, "b": turn("b", "configure the linter", "ok")})
    assert (await api.search(root, "bravo")).hits
    path = root / PATHS.rollout_file("a")
    path.write_text(CHANGES[name](text))
    age(root)
    await api.search(root, "bravo alpha")
    assert file_postings(root) == await rebuilt_postings(root, tmp_path)


async def test_a_tier_emptied_mid_pass_leaves_no_file_indexed_in_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One pass over a grown file (``a``: only its new line is to be indexed) and a file that
    no longer reads back and whose block is damaged (``b``): dropping ``b`` empties the tier.
    ``a`` must then be indexed whole again, not only its new line."""
    root = workspace(
        tmp_path,
        {
            "a": turn("a", "alpha zebra question", "alpha answer"),
            "b": turn("b", "bravo question", "bravo answer"),
        },
    )
    await settled(root)
    damage(root, "UPDATE passage_blocks SET texts = ? WHERE id IN "
           "(SELECT block FROM passages WHERE rid = 'b')", (b"\x00 not a stream",))  # fmt: skip
    with (root / PATHS.rollout_file("a")).open("a") as f:
        f.write(turn("a", "second yak question", "yak answer", 1))
    (root / PATHS.rollout_file("b")).write_text(turn("b", "bravo again", "bravo", 1))
    real = _index_search.read_isolated

    async def without_b(session: Any, paths: list[str]) -> Any:
        found, bad = await real(session, paths)
        return {p: d for p, d in found.items() if not p.endswith("/b.jsonl")}, bad

    monkeypatch.setattr(_index_search, "read_isolated", without_b)
    await api.search(root, "zebra")
    monkeypatch.setattr(_index_search, "read_isolated", real)
    hits = [h for h in (await api.search(root, "zebra")).hits if h.tier == "transcript"]
    assert [(h.rollout_id, h.segment) for h in hits] == [("a", 1)]
    yak = [h for h in (await api.search(root, "yak")).hits if h.tier == "transcript"]
    assert [(h.rollout_id, h.segment) for h in yak][:1] == [("a", 2)]
