"""The transcript tier of search: passages of the recorded conversations (``sessions/``).

Distilled memory (``MEMORY.md``, rollout summaries, skills: ``_search``) is what generation
chose to keep; the rollout files are where nothing was dropped. This module indexes them in
the layout index (``_index``) so ``search`` can fall back on them:

- each segment (one line of ``<sessions_dir>/<rollout_id>.jsonl``) is cut into *passages*: a
  user or assistant message, a tool call, a tool output, a final output, each split at lines
  into pieces of at most ``PASSAGE_CHARS`` (an item's first ``ITEM_CHARS`` only), every piece
  passed through ``sandmem.redaction.redact`` before it is stored (nothing unredacted enters
  the index, whatever a hand-edited rollout file holds);
- the full-text table is *contentless* (FTS5 ``content=''``: terms, positions and lengths
  only); each passage's redacted text is kept once, compressed, in ``passage_blocks``: the
  passages of one indexing pass over one file, in blocks of about ``BLOCK_CHARS`` characters
  (a JSON list, zlib). It is read back for ranking and snippets (``bodies``) and to take a
  passage out of the full-text table, which SQLite 3.40's FTS5 does only when given the text
  it indexed (``drop_conversation``). A block that cannot be read back (a damaged or forged
  index file) empties the whole tier, indexed again from the files (``clear``). Why not read
  the text back from ``sessions/`` instead: a file that was truncated, rewritten or forgotten
  no longer holds the text the index must be given to take it out, and ranking would read
  and parse a segment per candidate passage;
- a rollout file is indexed by byte offset: segments are append-only, so when a file grew and
  the ``TAIL`` bytes before its indexed end are unchanged, only the lines after that end are
  parsed; a file that shrank or changed before its end is indexed again from the start;
- ``rank`` scores passages with FTS5's BM25 (``bm25()``), leaving out words found in more than
  ``COMMON_SHARE`` of the passages when rarer ones are there (they would make every passage a
  candidate and say nothing), and of the rest the more common ones past ``SCAN_BUDGET``
  passages (FTS5 scores every passage a word matches: this bounds one query's work); the
  best ``RESCORE_DEPTH`` passages the rest select are then ranked again with every word
  (``rescored``: FTS5's own BM25, computed from their text);
- ``merge`` puts the two tiers in one list: distilled hits first, unless a transcript passage
  covers more of the query (see ``coverage``).

Pure helpers (``passages``, ``merge``, ``coverage``) take data in and give data out; the SQL
helpers take the index's connection.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sqlite3
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sandmem._items import content_texts, item_kind
from sandmem.memory.rollouts import RolloutSegment, keep_item, parse_segment
from sandmem.memory.views._search import rows_in, within_budget

#: a passage is cut to at most this many characters (at a line break when there is one)
PASSAGE_CHARS = 600
#: only this many characters of one item (a message, a tool output) are indexed
ITEM_CHARS = 32_000
#: an item is redacted this far past ``ITEM_CHARS`` before it is cut there, so that a secret
#: the cut goes through is found whole (a secret is shorter)
_REDACT_PAST_CUT = 4096
#: how ``sandmem.redaction`` marks what it took out (not imported from there: its patterns
#: compile on import, which only indexing needs)
_MARKER = "[REDACTED:"
#: bytes before a file's indexed end that must be unchanged to index only what follows
TAIL = 256
#: a query word found in more than this share of passages is left out (when rarer ones are)
COMMON_SHARE = 0.2
#: at most this many passages are matched to rank one query: the chosen words are taken
#: rarest first while the passages holding them fit (the rarest always; ``within_budget``)
SCAN_BUDGET = 5_000
#: when words were left out for the budget: how many passages the rest select to be ranked
#: again with every word (``rescored``)
RESCORE_DEPTH = 100
#: passages ranked per hit asked for (duplicates of one passage are dropped after ranking)
OVERFETCH = 3
#: a text block (``passage_blocks``) is closed once its passages hold this many characters
BLOCK_CHARS = 16_000
#: a block's JSON is at most this many bytes (a larger block is stored as two); one that
#: decompresses to more is damaged. A block closes at ``BLOCK_CHARS`` characters plus one
#: passage: a redacted piece of ``PASSAGE_CHARS`` (a secret of one character may become a
#: marker of ~40), at most 6 bytes a character as JSON: ~0.25 MB at the very worst
BLOCK_BYTES = 1 << 20

_TOKENIZE = "tokenize='porter unicode61'"
SCHEMA = (
    """CREATE TABLE transcript_files (
        rid TEXT PRIMARY KEY, size INTEGER, mtime INTEGER, indexed INTEGER, segments INTEGER,
        tail TEXT)""",
    """CREATE TABLE passages (
        id INTEGER PRIMARY KEY, rid TEXT, segment INTEGER, kind TEXT, part INTEGER,
        block INTEGER, n INTEGER)""",
    "CREATE INDEX passages_rid ON passages (rid)",
    # ``memory status`` counts the passages that get vectors (``_vectors.counts``) by seeking
    # their kinds here, not by reading every passage (a scan grew with the transcripts)
    "CREATE INDEX passages_kind ON passages (kind, part)",
    # the redacted texts, ``n``-th of block ``block`` for a passage (``bodies``)
    "CREATE TABLE passage_blocks (id INTEGER PRIMARY KEY, texts BLOB)",
    f"CREATE VIRTUAL TABLE passages_fts USING fts5(body, {_TOKENIZE}, content='')",
)
#: the tables ``clear`` empties (the full-text table by its own command)
TABLES = ("transcript_files", "passages", "passage_blocks")
SCRATCH = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.passage_rows USING fts5vocab(main, passages_fts, "
    "'row')",
    # passages whose text block did not read back (``bodies``): the tier is emptied and
    # indexed again (``_index_search.verified``)
    "CREATE TABLE IF NOT EXISTS temp.damaged_passages (id INTEGER PRIMARY KEY)",
)
_WORD = re.compile(r"[^\W_]+")
#: what every passage goes through before it is stored (``sandmem.redaction.redact``)
Redact = Callable[[str], str]


@dataclass(frozen=True)
class Passage:
    """One piece of one item of a segment: ``kind`` is ``user``, ``assistant``, ``tool call``,
    ``tool output`` or ``final output``; ``part`` is the piece's place in its item (0: the
    first)."""

    kind: str
    text: str
    part: int = 0


@dataclass(frozen=True)
class TranscriptHit:
    """A ranked passage: its conversation, segment (the line of the rollout file), kind and
    text, its BM25 ``score`` (higher is better) and the query terms it holds."""

    rollout_id: str
    segment: int
    kind: str
    text: str
    score: float
    matched: frozenset[str]
    #: the passage's row id in the index (0: not from a table)
    pid: int = field(default=0, compare=False)


# ---------------------------------------------------------------- passages (pure)


def _item_passage(item: dict[str, Any]) -> tuple[str, str] | None:
    kind = item_kind(item)
    if kind == "message":
        role = str(item.get("role") or "")
        if role not in ("user", "assistant"):
            return None  # system and developer instructions say nothing about the work
        return role, "\n".join(content_texts(item.get("content")))
    if kind in ("function_call", "custom_tool_call", "local_shell_call"):
        name = str(item.get("name") or "tool")
        args = item.get("arguments", item.get("input", item.get("action")))
        return "tool call", f"{name} {args if isinstance(args, str) else _compact(args)}"
    if kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        output = item.get("output")
        text = output if isinstance(output, str) else "\n".join(content_texts(output))
        return "tool output", text
    return None


def _compact(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, default=str)


def split_text(text: str, size: int = PASSAGE_CHARS) -> Iterator[str]:
    """``text`` (its first ``ITEM_CHARS``) in pieces of at most ``size`` characters, cut after
    a line break when one is in the second half of a piece, else before a redaction marker
    the cut would go through; blank pieces are left out."""
    text = text[:ITEM_CHARS]
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            cut = text.rfind("\n", start + size // 2, end)
            mark = text.rfind(_MARKER, start + 1, end + len(_MARKER) - 1)
            if cut != -1:
                end = cut + 1
            elif start < mark < end and text.find("]", mark, end) == -1:
                end = mark
        piece = text[start:end].strip()
        if piece:
            yield piece
        start = end


def passages(segment: RolloutSegment, redact: Redact) -> list[Passage]:
    """The passages of one segment, redacted with ``redact`` (``str -> str``), in item order;
    an item repeated in the segment is indexed once."""
    found: list[Passage] = []
    seen: set[tuple[str, str]] = set()
    items = [*segment.input, *segment.generated_items]
    pairs = [_item_passage(item) for item in items if keep_item(item)]
    if isinstance(segment.final_output, str):
        pairs.append(("final output", segment.final_output))
    for pair in pairs:
        if pair is None or pair in seen:
            continue
        seen.add(pair)
        kind, text = pair
        # redacted whole, then cut: a secret a cut would split in two is found all the same
        clean = redact(text[: ITEM_CHARS + _REDACT_PAST_CUT])
        for part, piece in enumerate(split_text(clean)):
            found.append(Passage(kind, piece, part))
    return found


def passage_digest(text: str) -> str:
    """What ``redact-history`` records of a passage it matched (``withheld_passages``): the
    SHA-256 of its text (the text is in the rollout file already; the digest adds nothing
    to what is on disk, and no pattern is kept)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def withheld_passages(data: bytes, matches: Callable[[str], bool], redact: Redact) -> set[str]:
    """The digests of the passages of a rollout file's ``data`` that ``matches`` (a
    ``redact-history`` pattern): each passage that matches alone, and two neighbouring pieces
    of one item that match only together (a match cut in two by a passage boundary)."""
    found: set[str] = set()
    for line in data.split(b"\n"):
        passages = segment_passages(line, redact)
        hit = [matches(p.text) for p in passages]
        for i, passage in enumerate(passages):
            if hit[i]:
                found.add(passage_digest(passage.text))
            following = passages[i + 1] if i + 1 < len(passages) else None
            if (
                following is not None
                and not hit[i]
                and not hit[i + 1]
                and following.part == passage.part + 1
                and following.kind == passage.kind
                and matches(passage.text + "\n" + following.text)
            ):
                found |= {passage_digest(passage.text), passage_digest(following.text)}
    return found


def segment_passages(line: bytes, redact: Redact) -> list[Passage]:
    """The passages of one rollout line (none when it is not a segment)."""
    segment = parse_segment(line)
    return [] if segment is None else passages(segment, redact)


def lines_from(data: bytes, offset: int) -> tuple[list[bytes], int]:
    """The complete lines of ``data`` after ``offset`` and the offset after the last one (a
    last line without its newline is a write in progress: it waits)."""
    end = data.rfind(b"\n") + 1
    if end <= offset:
        return [], offset
    return data[offset:end].split(b"\n")[:-1], end


# ---------------------------------------------------------------- the tables


def create_tables(conn: sqlite3.Connection) -> None:
    for statement in SCHEMA:
        conn.execute(statement)


def scratch(conn: sqlite3.Connection) -> None:
    for statement in SCRATCH:
        conn.execute(statement)


def drop_conversation(conn: sqlite3.Connection, rid: str) -> bool:
    """Remove a conversation's passages (and their vectors' refs: ``_vectors``), their text
    blocks and its file row. The full-text table forgets a passage when given the text it
    indexed (a contentless FTS5 table): when a block cannot be read back, the whole tier is
    emptied instead (``clear``), so no term of the conversation is left behind, and the
    answer is ``False``."""
    rows = conn.execute("SELECT id, block, n FROM passages WHERE rid = ?", (rid,)).fetchall()
    texts = _blocks(conn, {int(block) for _, block, _ in rows if isinstance(block, int)})
    found = [(int(pid), _nth(texts, block, n)) for pid, block, n in rows]
    if any(text is None for _, text in found):
        clear(conn)
        return False
    _vectors_of(conn, "SELECT id FROM passages WHERE rid = ?", (rid,))
    conn.executemany(
        "INSERT INTO passages_fts (passages_fts, rowid, body) VALUES ('delete', ?, ?)", found
    )
    conn.execute(
        "DELETE FROM passage_blocks WHERE id IN (SELECT block FROM passages WHERE rid = ?)",
        (rid,),
    )
    conn.execute("DELETE FROM passages WHERE rid = ?", (rid,))
    conn.execute("DELETE FROM transcript_files WHERE rid = ?", (rid,))
    return True


def clear(conn: sqlite3.Connection) -> None:
    """Empty the tier (every conversation is indexed again from its file at the next use)."""
    _vectors_of(conn, "SELECT id FROM passages", ())
    empty_fts(conn)
    for table in TABLES:
        conn.execute(f"DELETE FROM {table}")
    conn.execute("DELETE FROM temp.damaged_passages")


def empty_fts(conn: sqlite3.Connection) -> None:
    """Empty the full-text table (which, contentless, takes no ``DELETE``)."""
    conn.execute("INSERT INTO passages_fts (passages_fts) VALUES ('delete-all')")


def _vectors_of(conn: sqlite3.Connection, rows: str, params: tuple[object, ...]) -> None:
    """Drop the vector refs of the passages ``rows`` selects, noting their keys in
    ``temp.dropped_keys`` (the vectors no ref holds then go: ``_vectors.collect``)."""
    where = f"tier IN (1, 3) AND ref IN ({rows})"  # ``_vectors``: PASSAGE and its PARTIAL
    conn.execute(f"INSERT INTO temp.dropped_keys SELECT key FROM vector_refs WHERE {where}", params)
    conn.execute(f"DELETE FROM vector_refs WHERE {where}", params)


def add_lines(
    conn: sqlite3.Connection,
    rid: str,
    first_segment: int,
    lines: Sequence[bytes],
    redact: Redact,
    withheld: frozenset[str] = frozenset(),
) -> int:
    """Index ``lines`` of a rollout file, the first being segment ``first_segment``, leaving
    out the passages whose ``passage_digest`` is in ``withheld`` (``redact-history`` matched
    them); returns the number of the next segment."""
    store_blocks(conn, rid, first_segment, cut_blocks(lines, redact, withheld))
    return first_segment + len(lines)


def cut_blocks(
    lines: Iterable[bytes], redact: Redact, withheld: frozenset[str] = frozenset()
) -> list[Block]:
    """Rollout ``lines`` cut into passages (``line_passages``) and packed in blocks
    (``pack_blocks``): the work of indexing a file that needs no index, which
    ``_passage_worker`` runs in other processes."""
    return pack_blocks(line_passages(lines, redact, withheld))


def line_passages(
    lines: Iterable[bytes], redact: Redact, withheld: frozenset[str] = frozenset()
) -> list[tuple[int, Passage]]:
    """The passages of rollout ``lines``, each with its line's place among them (0: the
    first), leaving out those whose ``passage_digest`` is in ``withheld``."""
    found: list[tuple[int, Passage]] = []
    for number, line in enumerate(lines):
        for passage in segment_passages(line, redact):
            if withheld and passage_digest(passage.text) in withheld:
                continue
            found.append((number, passage))
    return found


#: a block of passages, each with its line's place, and its texts packed (``_unpack``)
Block = tuple[list[tuple[int, Passage]], bytes]


def pack_blocks(found: Iterable[tuple[int, Passage]]) -> list[Block]:
    """``line_passages`` in blocks of about ``BLOCK_CHARS`` characters, each with its texts
    packed (a JSON list, zlib); a block whose JSON would pass ``BLOCK_BYTES`` is two."""
    blocks: list[Block] = []
    block: list[tuple[int, Passage]] = []
    size = 0
    for place, passage in found:
        block.append((place, passage))
        size += len(passage.text)
        if size >= BLOCK_CHARS:
            _pack(block, blocks)
            block, size = [], 0
    if block:
        _pack(block, blocks)
    return blocks


def _pack(block: list[tuple[int, Passage]], blocks: list[Block]) -> None:
    data = json.dumps([p.text for _, p in block], ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    )
    if len(data) > BLOCK_BYTES and len(block) > 1:
        half = len(block) // 2
        _pack(block[:half], blocks)
        _pack(block[half:], blocks)
        return
    blocks.append((block, zlib.compress(data)))


def store_blocks(
    conn: sqlite3.Connection, rid: str, first_segment: int, blocks: Iterable[Block]
) -> None:
    """Store ``pack_blocks`` of a file's lines from segment ``first_segment`` on: each
    block's packed texts (``passage_blocks``), then a row and the full-text entry of each of
    its passages."""
    for block, packed in blocks:
        block_id = conn.execute(
            "INSERT INTO passage_blocks (texts) VALUES (?)", (packed,)
        ).lastrowid
        first = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM passages").fetchone()[0])
        conn.executemany(
            "INSERT INTO passages VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (first + n, rid, first_segment + place, p.kind, p.part, block_id, n)
                for n, (place, p) in enumerate(block)
            ],
        )
        conn.executemany(
            "INSERT INTO passages_fts (rowid, body) VALUES (?, ?)",
            [(first + n, p.text) for n, (_, p) in enumerate(block)],
        )


def count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM passages").fetchone()[0])


def bodies(conn: sqlite3.Connection, ids: Iterable[int]) -> dict[int, str]:
    """The text of each passage of ``ids`` (by id), read back from its block; a passage with
    no row or whose block cannot be read is left out (the latter noted in
    ``temp.damaged_passages``: see ``damaged``)."""
    sql = "SELECT id, block, n FROM passages WHERE id IN ({marks})"
    rows: list[tuple[int, object, object]] = list(rows_in(conn, sql, sorted(set(ids))))
    texts = _blocks(conn, {block for _, block, _ in rows if isinstance(block, int)})
    found = {int(pid): _nth(texts, block, n) for pid, block, n in rows}
    damaged = [(pid,) for pid, text in found.items() if text is None]
    if damaged:
        conn.executemany("INSERT OR IGNORE INTO temp.damaged_passages VALUES (?)", damaged)
    return {pid: text for pid, text in found.items() if text is not None}


def damaged(conn: sqlite3.Connection) -> bool:
    """Whether a passage's text block did not read back since the last ``clear``."""
    return conn.execute("SELECT 1 FROM temp.damaged_passages LIMIT 1").fetchone() is not None


def _blocks(conn: sqlite3.Connection, ids: set[int]) -> dict[int, list[str]]:
    """The texts of each block of ``ids`` that reads back whole (``_unpack``), by id."""
    found: dict[int, list[str]] = {}
    # as bytes whatever the file stores there (a text that is no UTF-8 would raise)
    sql = "SELECT id, CAST(texts AS BLOB) FROM passage_blocks WHERE id IN ({marks})"
    for block, data in rows_in(conn, sql, sorted(ids)):
        texts = _unpack(data)
        if texts is not None:
            found[int(block)] = texts
    return found


def _unpack(data: object) -> list[str] | None:
    """A block's texts: zlib-compressed JSON, a list of strings, at most ``BLOCK_BYTES`` once
    decompressed; ``None`` for anything else (the file is hostile: a forged block may be
    anything, a bomb of zeros or a nesting past the parser's limit included)."""
    if not isinstance(data, bytes):
        return None
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(data, BLOCK_BYTES)
        whole = inflate.eof and not inflate.unconsumed_tail and not inflate.unused_data
        texts = json.loads(raw.decode("utf-8", "surrogatepass")) if whole else None
    except (zlib.error, ValueError, RecursionError):
        return None
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return None
    return texts


def _nth(texts: dict[int, list[str]], block: object, n: object) -> str | None:
    found = texts.get(block) if isinstance(block, int) else None
    if found is None or not isinstance(n, int) or not 0 <= n < len(found):
        return None
    return found[n]


# ---------------------------------------------------------------- ranking


def query_words(query: str, cap: int) -> list[str]:
    """The distinct words of ``query`` (lower-cased), in order, at most ``cap``."""
    words: dict[str, None] = {}
    for match in _WORD.finditer(query):
        words.setdefault(match.group().lower())
        if len(words) == cap:
            break
    return list(words)


def stems(conn: sqlite3.Connection, words: Sequence[str]) -> list[list[str]]:
    """Each word's terms as the index sees them (stemmed; usually one), through the scratch
    query table of ``_search``."""
    conn.execute("DELETE FROM temp.query")
    conn.executemany(
        "INSERT INTO temp.query (rowid, text) VALUES (?, ?)",
        [(i + 1, word) for i, word in enumerate(words)],
    )
    found: list[list[str]] = [[] for _ in words]
    for doc, term in conn.execute("SELECT doc, term FROM temp.query_terms ORDER BY doc, offset"):
        if str(term) not in found[int(doc) - 1]:
            found[int(doc) - 1].append(str(term))
    conn.execute("DELETE FROM temp.query")
    return found


def idf(total: int, n: int) -> float:
    """The always-positive inverse document frequency ``_search`` uses too."""
    return math.log(1 + (total - n + 0.5) / (n + 0.5))


def doc_counts(
    conn: sqlite3.Connection, terms: Iterable[str], known: dict[str, int] | None = None
) -> dict[str, int]:
    """How many passages hold each term. FTS5 counts them by reading the term's whole list
    of rows, so a common word costs milliseconds: ``known`` (one search's counts, filled
    here) asks each term once."""
    known = {} if known is None else known
    for term in terms:
        if term not in known:
            row = conn.execute(
                "SELECT doc FROM temp.passage_rows WHERE term = ?", (term,)
            ).fetchone()
            known[term] = int(row[0]) if row else 0
    return known


def weights(
    conn: sqlite3.Connection,
    terms: Iterable[str],
    total: int,
    known: dict[str, int] | None = None,
) -> dict[str, float]:
    """Each term's idf over the ``total`` passages, by term (``known``: as ``doc_counts``)."""
    terms = list(terms)
    df = doc_counts(conn, terms, known)
    return {term: idf(total, df[term]) if total else 1.0 for term in terms}


def rank(
    conn: sqlite3.Connection,
    query: str,
    limit: int,
    cap: int,
    total: int,
    known: dict[str, int] | None = None,
) -> list[TranscriptHit]:
    """The ``limit`` best passages for ``query`` among ``total`` passages, best first (ties by
    conversation, segment), one per distinct (conversation, text) (``known``: as
    ``doc_counts``)."""
    words = query_words(query, cap)
    if not words:
        return []
    word_stems = stems(conn, words)
    terms = sorted({t for found in word_stems for t in found})
    if not terms or not total:
        return []
    df = doc_counts(conn, terms, known)
    present = [w for w, found in zip(words, word_stems, strict=True) if any(df[t] for t in found)]
    if not present:
        return []
    rare = [
        w
        for w, found in zip(words, word_stems, strict=True)
        if w in present and all(df[t] <= COMMON_SHARE * total for t in found)
    ]
    wanted = rare or present
    stems_of = dict(zip(words, word_stems, strict=True))
    costs = [sum(df[t] for t in stems_of[w]) for w in wanted]
    chosen = [wanted[i] for i in within_budget(costs, SCAN_BUDGET)]
    pruned = len(chosen) < len(wanted)
    expression = " OR ".join('"' + w.replace('"', '""') + '"' for w in chosen)
    ranked = conn.execute(
        "SELECT f.rowid, f.rank FROM passages_fts AS f WHERE passages_fts MATCH ? "
        "ORDER BY f.rank LIMIT ?",
        (expression, max(limit * OVERFETCH, RESCORE_DEPTH) if pruned else limit * OVERFETCH),
    ).fetchall()
    text = bodies(conn, [int(pid) for pid, _ in ranked])
    rows = [(int(pid), text[int(pid)], score) for pid, score in ranked if int(pid) in text]
    if pruned:
        again = rescored(conn, rows, [stems_of[w] for w in wanted], df)
        rows = rows[: limit * OVERFETCH] if again is None else again[: limit * OVERFETCH]
    if not rows:
        return []
    meta = {
        int(pid): (str(rid), int(seg), str(kind))
        for pid, rid, seg, kind in conn.execute(
            f"SELECT id, rid, segment, kind FROM passages WHERE id IN "
            f"({','.join('?' * len(rows))})",
            [row[0] for row in rows],
        )
    }
    matched = _matched(conn, [(int(r[0]), str(r[1])) for r in rows], set(terms))
    hits: list[TranscriptHit] = []
    seen: set[tuple[str, str]] = set()
    ordered = sorted(rows, key=lambda r: (r[2], *meta.get(int(r[0]), ("", 0, ""))[:2]))
    for pid, body, score in ordered:
        where = meta.get(int(pid))
        if where is None or (where[0], body) in seen:
            continue
        seen.add((where[0], body))
        hits.append(
            TranscriptHit(
                where[0], where[1], where[2], body, -float(score), matched[int(pid)], int(pid)
            )
        )
        if len(hits) == limit:
            break
    return hits


def rescored(
    conn: sqlite3.Connection,
    rows: list[Any],
    phrases: list[list[str]],
    df: dict[str, int],
) -> list[tuple[int, str, float]] | None:
    """``rows`` (rowid, body, rank) ranked again by FTS5's own BM25 as if the query held every
    one of ``phrases`` (each a word's terms; ``df``: the passages holding each term): the
    terms counted in the bodies tokenized anew, the averages from FTS5's own record. Best
    first. ``None`` when that cannot be done exactly (a word of several terms, an unreadable
    averages record): the caller keeps the first ranking."""
    if any(len(phrase) != 1 for phrase in phrases):
        return None
    averages = _averages(conn)
    if averages is None:
        return None
    total, average = averages
    terms = [phrase[0] for phrase in phrases]
    conn.executemany(
        "INSERT INTO temp.stage_lines (rowid, text) VALUES (?, ?)",
        [(int(r[0]), str(r[1])) for r in rows],
    )
    sizes = {
        int(doc): int(n)
        for doc, n in conn.execute("SELECT doc, count(*) FROM temp.stage_line_terms GROUP BY doc")
    }
    freq: dict[tuple[int, str], int] = {}
    marks = ",".join("?" * len(terms))
    for doc, term in conn.execute(
        f"SELECT doc, term FROM temp.stage_line_terms WHERE term IN ({marks})", terms
    ):
        key = (int(doc), str(term))
        freq[key] = freq.get(key, 0) + 1
    conn.execute("DELETE FROM temp.stage_lines")
    weights = [max(math.log((total - df[t] + 0.5) / (df[t] + 0.5)), 1e-6) for t in terms]
    out = []
    for pid, body, _ in rows:
        score = 0.0
        length = sizes.get(int(pid), 0)
        for term, weight in zip(terms, weights, strict=True):
            tf = freq.get((int(pid), term), 0)
            score += weight * (tf * 2.2) / (tf + 1.2 * (1 - 0.75 + 0.75 * length / average))
        out.append((int(pid), str(body), -1.0 * score))
    out.sort(key=lambda row: row[2])
    return out


def _averages(conn: sqlite3.Connection) -> tuple[int, float] | None:
    """FTS5's count of passages and their average length in tokens, from its averages record
    (row 1 of ``passages_fts_data``: varints, the row count then the token count)."""
    row = conn.execute("SELECT block FROM passages_fts_data WHERE id = 1").fetchone()
    if row is None or not isinstance(row[0], bytes):
        return None
    try:
        total, at = _varint(row[0], 0)
        tokens, _ = _varint(row[0], at)
    except IndexError:
        return None
    if total <= 0 or tokens <= 0:
        return None
    return total, tokens / total


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's varint at ``at`` (big-endian, 7 bits a byte, the ninth byte whole) and the
    offset after it."""
    value = 0
    for i in range(8):
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | data[at + 8], at + 9


def passage_hits(
    conn: sqlite3.Connection, scored: list[tuple[int, float]], terms: set[str]
) -> list[TranscriptHit]:
    """Hits for passages found another way than BM25 (``scored``: passage id and score, in
    order), with the ``terms`` of the query each holds; one per distinct (conversation,
    text), ids with no row left out."""
    if not scored:
        return []
    ids = [pid for pid, _ in scored]
    marks = ",".join("?" * len(ids))
    text = bodies(conn, ids)
    rows = {
        int(r[0]): (str(r[1]), int(r[2]), str(r[3]), text[int(r[0])])
        for r in conn.execute(
            f"SELECT id, rid, segment, kind FROM passages WHERE id IN ({marks})", ids
        )
        if int(r[0]) in text
    }
    found = [(pid, score) for pid, score in scored if pid in rows]
    matched = _matched(conn, [(pid, rows[pid][3]) for pid, _ in found], terms) if terms else {}
    hits: list[TranscriptHit] = []
    seen: set[tuple[str, str]] = set()
    for pid, score in found:
        rid, segment, kind, body = rows[pid]
        if (rid, body) in seen:
            continue
        seen.add((rid, body))
        hits.append(
            TranscriptHit(rid, segment, kind, body, score, matched.get(pid, frozenset()), pid)
        )
    return hits


def _matched(
    conn: sqlite3.Connection, bodies: list[tuple[int, str]], terms: set[str]
) -> dict[int, frozenset[str]]:
    """The query terms each body holds (tokenized in ``_search``'s scratch table)."""
    conn.executemany("INSERT INTO temp.stage_lines (rowid, text) VALUES (?, ?)", bodies)
    found: dict[int, set[str]] = {pid: set() for pid, _ in bodies}
    marks = ",".join("?" * len(terms))
    for doc, term in conn.execute(
        f"SELECT DISTINCT doc, term FROM temp.stage_line_terms WHERE term IN ({marks})",
        sorted(terms),
    ):
        found[int(doc)].add(str(term))
    conn.execute("DELETE FROM temp.stage_lines")
    return {pid: frozenset(t) for pid, t in found.items()}


# ---------------------------------------------------------------- the two tiers in one list


def coverage(matched: Iterable[str], weight: dict[str, float]) -> float:
    """The share of the query's weight (``weight``: each query term's idf) that ``matched``
    holds, 0..1."""
    whole = sum(weight.values())
    if whole <= 0:
        return 0.0
    return sum(weight.get(term, 0.0) for term in set(matched)) / whole


def merge(
    distilled: Sequence[Any],
    transcripts: Sequence[Any],
    covers: Any,
    limit: int,
) -> list[Any]:
    """Both tiers in one list of at most ``limit``, each tier in its own order: the next
    distilled hit goes first unless the next transcript hit covers more of the query
    (``covers(hit)``: ``coverage`` of the terms it holds). So distilled memory comes first
    whenever it covers the query as well as the transcripts do."""
    out: list[Any] = []
    i = j = 0
    while len(out) < limit and (i < len(distilled) or j < len(transcripts)):
        take_distilled = j >= len(transcripts) or (
            i < len(distilled) and covers(distilled[i]) >= covers(transcripts[j]) - 1e-9
        )
        if take_distilled:
            out.append(distilled[i])
            i += 1
        else:
            out.append(transcripts[j])
            j += 1
    return out
