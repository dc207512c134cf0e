"""Search in the layout index: bringing its two tiers in line with the files, ranking them,
and checking each hit against its file.

- distilled memory: the sections of ``MEMORY.md``, the rollout summaries and the skills
  (``_search``'s tables), indexed again per file that changed;
- the transcripts: the passages of ``<sessions_dir>/*.jsonl`` (``_transcripts``' tables),
  indexed by byte offset (only what was appended since the last use is parsed).

``rank_both`` ranks each tier and merges them (``_transcripts.merge``: distilled memory first
unless a transcript passage covers more of the query); ``verified`` drops a hit whose text is
not in the file it names (a forged row), so a snippet always comes from a file.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated

from pydantic import Field, TypeAdapter, ValidationError

from sandmem._errors import SandboxError, UserError
from sandmem.memory import _files
from sandmem.memory._results import SearchHit, SearchInfo
from sandmem.memory.layout import RACY_NS, MemoryPaths, Stat, listing_digest, read_isolated
from sandmem.memory.recording import rollout_id_of
from sandmem.memory.rollouts import ROLLOUT_ID_PATTERN
from sandmem.memory.views import _align, _passage_worker, _search, _transcripts, _vectors

if TYPE_CHECKING:
    from sandmem.memory.views._index import LayoutIndex
    from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory")

#: files read at once while indexing
READ_BATCH = 64
#: the large directory of each search tier (by ``Listing`` field), which a search skips
#: listing when its quick check passes (``_index.LayoutIndex._quick``)
QUICK_DIRS = {"search": "summaries", "transcripts": "sessions"}

#: one hit of either tier
AnyHit = _search.Hit | _transcripts.TranscriptHit


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


async def _stat_each(session: SandboxSession, paths: list[str]) -> dict[str, Stat | None]:
    """``stat_many``; a path it cannot stat (a symlink, a special file) counts as missing."""
    try:
        found = await _files.stat_many(session, paths)
    except SandboxError:
        found = {}
        for path in paths:
            try:
                found.update(await _files.stat_many(session, [path]))
            except SandboxError:
                found[path] = None
    return {p: None if s is None else (s.size, s.mtime_ns) for p, s in found.items()}


def redactor() -> _transcripts.Redact:
    """The redaction every passage goes through before it is indexed."""
    from sandmem.redaction import redact  # its patterns compile on import: only when indexing

    return redact


# ---------------------------------------------------------------- distilled memory


def _searchable(index: LayoutIndex) -> dict[str, Stat]:
    found: dict[str, Stat] = {}
    memory_md = index.listing.memories.get(index.paths.memory_md)
    if memory_md is not None:
        found[index.paths.memory_md] = memory_md
    for path, stat in index.listing.summaries.items():
        if path.endswith(".md"):
            found[path] = stat
    found.update(index.listing.skills)
    return found


def _small_digest(index: LayoutIndex) -> str | None:
    """The digest of what the search tier holds beside the rollout summaries (``MEMORY.md``
    and the skills), always listed: the quick check compares it."""
    memory_md = index.listing.memories.get(index.paths.memory_md)
    small = [(index.paths.memory_md, *memory_md)] if memory_md is not None else []
    small += [(path, size, mtime) for path, (size, mtime) in index.listing.skills.items()]
    return listing_digest([small])


async def _still_quick(index: LayoutIndex, tier: str, small: str | None) -> bool:
    """Whether ``tier`` passed its quick check (``LayoutIndex._quick``) and still may skip
    its rows: its digest was not withdrawn since (a changed ``redact-history`` record) and
    what it holds beside the large directory (``small``) is as it was. Else the large
    directory is listed now, for the full comparison."""
    if tier not in index.quick:
        return False
    kept = index._meta(f"{tier}_quick") or {}
    if index._meta(f"{tier}_digest") is not None and kept.get("small") == small:
        return True
    index.quick.discard(tier)
    await index.list_dir(QUICK_DIRS[tier])
    return False


async def refresh_search(index: LayoutIndex) -> None:
    """Index again every searchable file that differs from its row. When the rollout
    summaries' directory passed the quick check (not listed) and ``MEMORY.md`` and the
    skills are as they were, nothing is compared."""
    small = _small_digest(index)
    if await _still_quick(index, "search", small):
        return
    files = _searchable(index)
    unchanged, digest = index._unchanged("search_digest", files)
    if unchanged:
        index.keep_quick("search", digest, small)
        return
    conn = index.conn
    started_ns = time.time_ns()
    rows = {p: (s, m) for p, s, m in conn.execute("SELECT path, size, mtime FROM docs")}
    gone = [p for p in rows if p not in files]
    stale = sorted(p for p, stat in files.items() if p not in rows or not _matches(rows[p], stat))
    if gone or stale:
        index.will_change()
        _rows_changed(index)
    for path in gone:
        drop_file(index, path)
    summaries = f"{index.paths.summaries_dir}/"
    for start in range(0, len(stale), READ_BATCH):
        batch = stale[start : start + READ_BATCH]
        found, _bad = await read_isolated(index.session, batch)
        for path in batch:
            drop_file(index, path)
            data = found.get(path)
            if data is None:
                continue  # unreadable: no row, looked at again next time
            conn.execute(
                "INSERT INTO docs VALUES (?, ?, ?)", (path, *_trusted(files[path], started_ns))
            )
            text = data.decode("utf-8", "replace")
            if "\x00" in text:
                continue
            if path.startswith(summaries):
                text = _search._without_header(text)
            _search.add_file(conn, path, text)
    _search.fill_lengths(conn)
    if gone or stale:
        index._set_meta("corpus", _search.corpus(conn))
    if digest is not None:
        index._set_meta("search_digest", digest)
    index.keep_quick("search", digest, small)


def _rows_changed(index: LayoutIndex) -> None:
    """Rows of a tier are about to be dropped or added: their vectors are incomplete, and
    vectors no row holds any more are deleted at the end of the refresh (``_vectors``)."""
    index._set_meta("vectors_complete", False)
    index.vectors_dropped = True


def drop_file(index: LayoutIndex, path: str) -> None:
    where = "tier IN (?, ?) AND ref IN (SELECT id FROM sections WHERE path = ?)"
    params = (_vectors.SECTION, _vectors.PARTIAL[_vectors.SECTION], path)
    index.conn.execute(
        f"INSERT INTO temp.dropped_keys SELECT key FROM vector_refs WHERE {where}", params
    )
    index.conn.execute(f"DELETE FROM vector_refs WHERE {where}", params)
    _search.drop_file(index.conn, path)
    index.conn.execute("DELETE FROM docs WHERE path = ?", (path,))


def rank_memory(index: LayoutIndex, query: str, limit: int) -> list[_search.Hit]:
    sizes = index._meta("corpus")
    return _search.rank(index.conn, query, limit, tuple(sizes) if sizes else None)


# ---------------------------------------------------------------- transcripts


def _rollouts(index: LayoutIndex) -> dict[str, Stat]:
    """The rollout files directly in the sessions directory, by rollout id."""
    prefix = f"{index.paths.sessions_dir}/"
    found: dict[str, Stat] = {}
    for path, stat in index.listing.sessions.items():
        name = path[len(prefix) :]
        rid = rollout_id_of(name)
        if rid is not None and ROLLOUT_ID_PATTERN.fullmatch(rid):
            found[rid] = stat
    return found


#: what ``redact-history`` withholds from the transcript tier (``record_withheld``)
WITHHELD_NAME = ".search_withheld.json"
_WITHHELD = TypeAdapter(
    dict[
        Annotated[str, Field(pattern=ROLLOUT_ID_PATTERN.pattern)],
        list[Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]],
    ]
)


def withheld_path(paths: MemoryPaths) -> str:
    """Where ``redact-history`` records what the transcript tier withholds."""
    return f"{paths.memories_dir}/{WITHHELD_NAME}"


async def load_withheld(
    session: SandboxSession, paths: MemoryPaths
) -> tuple[dict[str, frozenset[str]] | None, str]:
    """The passages ``redact-history`` withheld, by conversation, and the file's digest;
    ``None`` (index no transcript) when the file is there but cannot be read or is not a
    valid record: the tier fails closed rather than let a matched secret back in."""
    try:
        data = await _files.read(session, withheld_path(paths))
    except SandboxError as exc:
        logger.warning(
            "%s not readable (%s): the transcript tier is left empty", WITHHELD_NAME, exc
        )
        return None, "unreadable"
    if data is None:
        if await _files.kind(session, withheld_path(paths)) is not None:  # a link, a FIFO
            logger.warning("%s is not a regular file: no transcript is indexed", WITHHELD_NAME)
            return None, "unreadable"
        return {}, "none"
    digest = hashlib.sha256(data).hexdigest()
    try:
        found = _WITHHELD.validate_json(data)
    except ValidationError:
        logger.warning("%s is not a valid record: no transcript is indexed", WITHHELD_NAME)
        return None, digest
    return {rid: frozenset(d) for rid, d in found.items()}, digest


async def refresh_transcripts(index: LayoutIndex) -> None:
    """Index what was appended to each rollout file since it was last indexed; a file that
    shrank or changed before its indexed end is indexed again; a file gone is dropped. The
    passages ``redact-history`` withheld are left out: when that record changed, every
    rollout file is indexed again."""
    files = _rollouts(index)
    conn = index.conn
    withheld, withheld_digest = await load_withheld(index.session, index.paths)
    if index._meta("withheld_digest") != withheld_digest:
        index.will_change()
        _rows_changed(index)
        _transcripts.clear(conn)
        conn.execute("DELETE FROM meta WHERE key IN ('transcripts_digest', 'passages')")
        index._set_meta("withheld_digest", withheld_digest)
    if withheld is None:
        return  # fail closed: no transcript is indexed while the record is unusable
    index.withheld = withheld
    if await _still_quick(index, "transcripts", None):
        return
    unchanged, digest = index._unchanged("transcripts_digest", index.listing.sessions)
    if unchanged:
        index.keep_quick("transcripts", digest)
        return
    # a second pass only after the first found a damaged text block and emptied the tier
    if not await _catch_up(index, files) and not await _catch_up(index, files):
        return
    if digest is not None:
        index._set_meta("transcripts_digest", digest)
    index.keep_quick("transcripts", digest)


async def _catch_up(index: LayoutIndex, files: dict[str, Stat]) -> bool:
    """Index every rollout file of ``files`` whose row differs; ``False`` when a damaged text
    block made a drop empty the whole tier (``_drop``), so the files must be compared again.

    The new lines are cut into passages here, or, once ``_passage_worker.POOL_BYTES`` of
    them are waiting, by worker processes while this process stores each file's passages in
    turn (the index is the same either way)."""
    conn = index.conn
    started_ns = time.time_ns()
    rows = {
        str(rid): (size, mtime, indexed, segments, tail)
        for rid, size, mtime, indexed, segments, tail in conn.execute(
            "SELECT rid, size, mtime, indexed, segments, tail FROM transcript_files"
        )
    }
    gone = [rid for rid in rows if rid not in files]
    stale = sorted(
        r for r, stat in files.items() if r not in rows or not _matches(rows[r][:2], stat)
    )
    if gone or stale:
        index.will_change()
        _rows_changed(index)
        conn.execute("DELETE FROM meta WHERE key = 'passages'")  # counted again when asked
    whole = True
    for rid in gone:
        whole = _drop(index, rid) and whole
    redact = redactor() if stale else str
    pool: _passage_worker.Pool | None = None
    workers = _passage_worker.workers() if stale else 0
    waiting = 0  # bytes of new lines seen so far
    try:
        for start in range(0, len(stale), READ_BATCH):
            batch = stale[start : start + READ_BATCH]
            paths = [index.paths.rollout_file(rid) for rid in batch]
            found, _bad = await read_isolated(index.session, paths)
            planned: list[tuple[str, bytes, _Plan]] = []
            for rid, path in zip(batch, paths, strict=True):
                data = found.get(path)
                # a drop that emptied the tier (a damaged block) voids the plans made so far
                # in this batch (a grown file's plan indexes only its new lines): the caller
                # compares every file again
                if data is None:
                    if not _drop(index, rid):  # looked at again next time
                        return False
                    continue
                plan = _plan_file(index, rid, data)
                if plan is None:
                    return False
                planned.append((rid, data, plan))
                waiting += plan.end - plan.offset
            if pool is None and workers and waiting >= _passage_worker.POOL_BYTES:
                pool = _passage_worker.Pool(workers)
            asked = [
                pool.submit(plan.lines, plan.withheld) if pool is not None else None
                for _rid, _data, plan in planned
            ]
            for (rid, data, plan), future in zip(planned, asked, strict=True):
                blocks = None if future is None else await asyncio.wrap_future(future)
                if blocks is None:
                    blocks = _transcripts.cut_blocks(plan.lines, redact, plan.withheld)
                _store_file(index, rid, data, files[rid], started_ns, plan, blocks)
    finally:
        if pool is not None:
            pool.close()
    return whole


def _drop(index: LayoutIndex, rid: str) -> bool:
    """Drop a conversation from the transcript tier; ``False`` when a damaged text block
    made it empty the whole tier (``_transcripts.drop_conversation``): every file is then
    indexed again (the tier's digest is forgotten)."""
    if _transcripts.drop_conversation(index.conn, rid):
        return True
    _drop_failed(index)
    return False


def _drop_failed(index: LayoutIndex) -> None:
    """The transcript tier was emptied (``_transcripts.clear``): its vectors go and every
    rollout file is compared again at the next use."""
    logger.warning("a transcript text block of the memory index is damaged: indexing again")
    index.vectors_dropped = True
    index.conn.execute("DELETE FROM meta WHERE key IN ('transcripts_digest', 'passages')")


@dataclass(frozen=True)
class _Plan:
    """What indexing one rollout file takes: its ``lines`` from byte ``offset`` (the first
    being segment ``number``) up to byte ``end``, and the passages ``redact-history``
    withheld from it."""

    offset: int
    number: int
    lines: list[bytes]
    end: int
    withheld: frozenset[str]


def _plan_file(index: LayoutIndex, rid: str, data: bytes) -> _Plan | None:
    """Which of a rollout file's lines to index: those after its indexed end when the
    ``TAIL`` bytes before that end are unchanged, else all of them (its old passages are
    dropped). ``None`` when dropping them emptied the whole tier (``_drop``)."""
    offset, number = 0, 1
    row = index.conn.execute(
        "SELECT indexed, segments, tail FROM transcript_files WHERE rid = ?", (rid,)
    ).fetchone()
    if row is not None:
        end, segments, tail = row
        if (
            isinstance(end, int)
            and isinstance(segments, int)
            and 0 < end <= len(data)
            and data[max(0, end - _transcripts.TAIL) : end].hex() == tail
        ):
            offset, number = end, segments
    if offset == 0 and not _drop(index, rid):
        return None
    lines, end = _transcripts.lines_from(data, offset)
    return _Plan(offset, number, lines, end, index.withheld.get(rid, frozenset()))


def _store_file(
    index: LayoutIndex,
    rid: str,
    data: bytes,
    stat: Stat,
    started_ns: int,
    plan: _Plan,
    blocks: list[_transcripts.Block],
) -> None:
    """Store the passages cut from a file's planned lines (``_transcripts.cut_blocks``),
    and its row: how far it is indexed, and its size and time when the whole file was (else
    it is looked at again)."""
    _transcripts.store_blocks(index.conn, rid, plan.number, blocks)
    complete = plan.end == len(data) == stat[0]
    index.conn.execute(
        "INSERT OR REPLACE INTO transcript_files VALUES (?, ?, ?, ?, ?, ?)",
        (
            rid,
            *(_trusted(stat, started_ns) if complete else (None, None)),
            plan.end,
            plan.number + len(plan.lines),
            data[max(0, plan.end - _transcripts.TAIL) : plan.end].hex(),
        ),
    )


# ---------------------------------------------------------------- both tiers


def rank_both(index: LayoutIndex, query: str, limit: int) -> list[AnyHit]:
    """Distilled memory and transcript passages in one list (``_transcripts.merge``)."""
    distilled = rank_memory(index, query, limit)
    total = passage_count(index)
    query = _search.capped(query)
    passages = _transcripts.rank(
        index.conn, query, limit, _search.MAX_QUERY_TERMS, total, index.passage_df
    )
    if not passages:
        return list(distilled)
    terms = _search.query_terms(index.conn, query)
    weight = _transcripts.weights(index.conn, terms, total, index.passage_df)
    shown = _shown_terms(index, distilled, set(terms))

    def covers(hit: AnyHit) -> float:
        if isinstance(hit, _search.Hit):
            return _transcripts.coverage(shown.get(hit.sid, frozenset()), weight)
        return _transcripts.coverage(hit.matched, weight)

    merged: list[AnyHit] = _transcripts.merge(distilled, passages, covers, limit)
    return merged


def _shown_terms(
    index: LayoutIndex, hits: list[_search.Hit], terms: set[str]
) -> dict[int, frozenset[str]]:
    """The query terms each distilled hit *shows* — its section's own title and its best line
    — by section id. A long section (a rollout summary's outcome list, a task group) holds
    most words of most queries somewhere; what it answers is what it points at, so that is
    what is weighed against a transcript passage."""
    if not hits or not terms:
        return {}
    texts = [(h.sid, f"{(h.heading or '').rsplit(' > ', 1)[-1]}\n{h.snippet}") for h in hits]
    return _transcripts._matched(index.conn, texts, terms)


async def verified(index: LayoutIndex, hits: list[AnyHit]) -> list[AnyHit]:
    """``hits`` without those whose text is not in the file they name (a row forged in the
    index file, or a file changed since it was indexed): each such file is indexed again at
    the next use."""
    wanted = sorted(
        {h.path for h in hits if isinstance(h, _search.Hit)}
        | {
            index.paths.rollout_file(h.rollout_id)
            for h in hits
            if isinstance(h, _transcripts.TranscriptHit)
        }
    )
    if _transcripts.damaged(index.conn):  # a text block did not read back: index again
        index.will_change()
        _transcripts.clear(index.conn)
        _drop_failed(index)  # the hits found are still checked against their files below
    if not wanted:
        return hits
    found, _bad = await read_isolated(index.session, wanted)
    kept: list[AnyHit] = []
    redact: _transcripts.Redact | None = None
    for hit in hits:
        if isinstance(hit, _search.Hit):
            ok = _memory_hit_ok(hit, found.get(hit.path))
            if not ok:
                _forget_row(index, "search_digest")
                drop_file(index, hit.path)
        else:
            redact = redact or redactor()
            data = found.get(index.paths.rollout_file(hit.rollout_id))
            ok = _transcript_hit_ok(hit, data, redact)
            if not ok:
                _forget_row(index, "transcripts_digest")
                _drop(index, hit.rollout_id)
        if ok:
            kept.append(hit)
    collect_vectors(index)  # the vectors of rows dropped here
    return kept


def _forget_row(index: LayoutIndex, digest_key: str) -> None:
    """Before a row that does not match its file is dropped: the listing's digest goes too,
    so the next use looks at every file of that tier again."""
    logger.warning("memory index row does not match its file: indexing it again")
    index.will_change()
    index.vectors_dropped = True
    index.conn.execute("DELETE FROM meta WHERE key IN (?, 'passages')", (digest_key,))


def _memory_hit_ok(hit: _search.Hit, data: bytes | None) -> bool:
    if data is None:
        return False
    lines = data.decode("utf-8", "replace").splitlines()
    if not 1 <= hit.line <= len(lines):
        return False
    line = lines[hit.line - 1]
    return hit.snippet == _search._snippet(line) and (
        hit.heading is None or hit.heading.rsplit(" > ", 1)[-1] in data.decode("utf-8", "replace")
    )


def _transcript_hit_ok(
    hit: _transcripts.TranscriptHit, data: bytes | None, redact: _transcripts.Redact
) -> bool:
    if data is None:
        return False
    lines = data.split(b"\n")
    if not 1 <= hit.segment < len(lines):  # the last piece after the last newline is no line
        return False
    return any(
        p.text == hit.text and p.kind == hit.kind
        for p in _transcripts.segment_passages(lines[hit.segment - 1], redact)
    )


async def purge(index: LayoutIndex) -> None:
    """Merge both full-text indexes so deleted rows leave no term behind (with
    ``secure_delete`` freed pages are zeroed): ``forget`` calls it after a conversation's files
    are gone and the index was brought in line with them."""
    index.will_change()
    collect_vectors(index, everything=True)
    index.conn.execute("INSERT INTO passages_fts (passages_fts) VALUES ('optimize')")
    index.conn.execute("INSERT INTO sections_fts (sections_fts) VALUES ('optimize')")


async def search_hits(
    index: LayoutIndex, query: str, limit: int, *, transcripts: bool = True
) -> list[SearchHit]:
    """The public hits of one search: ranked (both tiers, or distilled memory only; hybrid
    when an embedder is installed, after embedding what is missing for at most
    ``_vectors.SEARCH_BUDGET_S``), checked against their files, transcript hits with their
    snippet line and rollout summary. ``index.ranking`` says which ranking it was."""
    embedder = _vectors.load()
    index.ranking = "bm25" if embedder is None else "hybrid"
    if embedder is not None:
        await refresh_vectors(index, embedder, _vectors.SEARCH_BUDGET_S)
        hits = rank_hybrid(index, query, limit, embedder, transcripts=transcripts)
    elif transcripts:
        hits = rank_both(index, query, limit)
    else:
        hits = list(rank_memory(index, query, limit))
    hits = await verified(index, hits)
    terms = _search.query_terms(index.conn, query) if hits else []
    total = passage_count(index)
    weight = _transcripts.weights(index.conn, terms, total, index.passage_df) if hits else {}
    summaries = await _summaries_of(index, hits)
    out: list[SearchHit] = []
    for hit in hits:
        if isinstance(hit, _search.Hit):
            out.append(
                SearchHit(
                    path=hit.path,
                    line=hit.line,
                    score=hit.score,
                    snippet=hit.snippet,
                    heading=hit.heading,
                )
            )
        else:
            out.append(_transcript_hit(index, hit, terms, weight, summaries))
    return out


async def _summaries_of(index: LayoutIndex, hits: list[AnyHit]) -> dict[str, str]:
    """The rollout summary file of each conversation a transcript hit is in, by rollout id,
    when it exists now."""
    ids = sorted({h.rollout_id for h in hits if isinstance(h, _transcripts.TranscriptHit)})
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    rows: dict[str, str | None] = {
        str(rid): name
        for rid, name in index.conn.execute(
            f"SELECT rid, summary_name FROM conversations WHERE rid IN ({marks})", ids
        )
    }
    # a conversation with no row yet (no listing has derived it: a layout only ever searched)
    if missing := [rid for rid in ids if rid not in rows]:
        rows.update(await index.summary_names(missing))
    named = {rid: f"{index.paths.memories_dir}/{name}" for rid, name in rows.items() if name}
    found = await _stat_each(index.session, sorted(set(named.values())))
    return {rid: path for rid, path in named.items() if found.get(path) is not None}


# ---------------------------------------------------------------- hybrid


#: how deep each ranking goes before fusion (at least the hits asked for)
FUSE_DEPTH = 30
#: reciprocal rank fusion (``rank_hybrid``): the constant, each ranking's weight (BM25 over
#: distilled memory, BM25 over the transcripts, cosine over both) and how sure a BM25 hit must
#: be to count fully (``_bm25_sureness``: a hit's weight is its ranking's times
#: ``BM25_SURENESS`` times the share of the query's idf weight it holds, at most 1).
#:
#: Why not the usual constant 60 with fixed weights (0.5, 0.5, 1), shipped until 2026-12-06:
#: with 60 a place barely counts (1/61 against 1/63), so every text BM25 held anywhere in its
#: top 30 — for a question worded unlike the memory, texts sharing only its common words —
#: went before cosine's best, and hybrid found less than cosine alone (figure 14: evidence@5
#: 0.646 against 0.708); and a BM25 first place weighed as cosine's 62nd, so an identifier
#: only BM25 finds (an error code, a port, a handle) fell out of the first ten. With 10 the
#: first places weigh; scaled by sureness, BM25's noise counts little and an exact identifier
#: as much as cosine's first. Chosen on another seed of the generated corpus than the
#: figure's (seed 7, 72 conversations: evidence@5 0.743 before, 0.854 now, cosine alone 0.854;
#: @1 0.451 before, 0.590 now; identifier lookups in the top 5 0.908 with the constant alone,
#: 1.000 with sureness), checked on the figure's seed (0.750 before, 0.785 now, cosine alone
#: 0.785; identifier lookups 1.000).
RRF_K = 10.0
RRF_WEIGHTS = (1.0, 1.0, 1.0)
BM25_SURENESS = 2.0
#: whether hybrid search re-ranks its first hits phrase by phrase (``_align``)
ALIGN = True


def collect_vectors(index: LayoutIndex, *, everything: bool = False) -> None:
    """After rows were dropped: delete the vectors no row holds any more (those whose refs
    were dropped; ``everything``: every ref and vector checked, ``_vectors.prune``) and make
    the process's copy of the vectors stale."""
    if not index.vectors_dropped and not everything:
        return
    index.will_change()
    if everything:
        _vectors.prune(index.conn)
    else:
        _vectors.collect(index.conn, index.paths.memories_dir)
    index._set_meta("vectors_gen", _token())
    index.vectors_dropped = False


def _token() -> str:
    import secrets

    return secrets.token_hex(8)


async def refresh_vectors(
    index: LayoutIndex, embedder: _vectors.Embedder, budget_s: float | None
) -> None:
    """Embed the rows that have no vector yet (for at most ``budget_s``; ``None``: all)."""
    conn = index.conn
    if index._meta("embedder") != embedder.name:
        index.will_change()
        conn.execute("DELETE FROM vector_refs")
        conn.execute("DELETE FROM vectors")
        conn.execute("DELETE FROM temp.dropped_keys")
        index._set_meta("embedder", embedder.name)
        index._set_meta("vectors_complete", False)
        index._set_meta("vectors_gen", _token())
    if index._meta("vectors_complete") is True:
        return
    made, done = await _vectors.embed_pending(
        conn, embedder, budget_s, index.will_change, index.paths.memories_dir
    )
    if made or done:
        index._set_meta("vectors_gen", _token())
    if done:
        index._set_meta("vectors_complete", True)


def _where(index: LayoutIndex) -> str:
    return f"{index.session.root}/{index.path}"


def rank_hybrid(
    index: LayoutIndex,
    query: str,
    limit: int,
    embedder: _vectors.Embedder,
    *,
    transcripts: bool = True,
) -> list[AnyHit]:
    """BM25 over distilled memory, BM25 over the transcripts and cosine over the vectors of
    both, fused by reciprocal rank (``RRF_K``, ``RRF_WEIGHTS``, each BM25 place scaled by how
    sure the hit is: ``_bm25_sureness``); ties keep distilled memory first. Then the first
    ``_align.DEPTH`` are re-ranked phrase by phrase (``_aligned``; ``ALIGN``), the hits BM25
    is sure of keeping their places. Each hit's ``score`` is its fused score, or, for a
    re-ranked hit, its place's value (above every hit not reached): higher is better."""
    depth = max(limit, FUSE_DEPTH)
    conn = index.conn
    query = _search.capped(query)
    distilled = rank_memory(index, query, depth)
    total = passage_count(index) if transcripts else 0
    lexical: list[_transcripts.TranscriptHit] = []
    if transcripts and total:
        lexical = _transcripts.rank(conn, query, depth, _search.MAX_QUERY_TERMS, total)
    tiers = (_vectors.SECTION, _vectors.PASSAGE) if transcripts else (_vectors.SECTION,)
    token = str(index._meta("vectors_gen") or "")
    dense = _vectors.dense_rank(conn, embedder, query, depth, _where(index), token, tiers)
    sections = {h.sid: h for h in distilled}
    passages = {h.pid: h for h in lexical}
    want_s = [(ref, score) for tier, ref, score in dense if tier == _vectors.SECTION]
    want_p = [(ref, score) for tier, ref, score in dense if tier == _vectors.PASSAGE]
    sizes = index._meta("corpus")
    total_sections = int(sizes[0]) if sizes else _search.corpus(conn)[0]
    for section in _search.section_hits(
        conn, [x for x in want_s if x[0] not in sections], query, total_sections
    ):
        sections[section.sid] = section
    terms = set(_search.query_terms(conn, query))
    wanted = [x for x in want_p if x[0] not in passages]
    for found in _transcripts.passage_hits(conn, wanted, terms):
        passages[found.pid] = found
    sure_s, sure_p = _bm25_sureness(index, distilled, lexical, terms, total)
    w_s, w_p, w_c = RRF_WEIGHTS
    fused = _vectors.fuse(
        [
            [(("s", h.sid), w_s * sure_s[h.sid]) for h in distilled],
            [(("p", h.pid), w_p * sure_p[h.pid]) for h in lexical],
            [(("s" if tier == _vectors.SECTION else "p", ref), w_c) for tier, ref, _ in dense],
        ],
        RRF_K,
    )
    order = {key: n for n, key in enumerate(fused)}
    ranked = sorted(fused, key=lambda key: (-fused[key], key[0] != "s", order[key]))
    out: list[AnyHit] = []
    seen: set[tuple[str, str]] = set()
    for kind, ref in ranked:
        hit: AnyHit | None = sections.get(ref) if kind == "s" else passages.get(ref)
        if hit is None:
            continue
        if isinstance(hit, _transcripts.TranscriptHit):
            if (hit.rollout_id, hit.text) in seen:
                continue
            seen.add((hit.rollout_id, hit.text))
        out.append(replace(hit, score=round(fused[(kind, ref)], 6)))
        if len(out) == max(limit, _align.DEPTH if ALIGN else 0):
            break
    sure = {("s", k) for k, v in sure_s.items() if v >= 1.0}
    sure |= {("p", k) for k, v in sure_p.items() if v >= 1.0}
    pinned = {n for n, h in enumerate(out) if _key(h) in sure}
    return _aligned(index, query, embedder, out, pinned)[:limit]


def _key(hit: AnyHit) -> tuple[str, int]:
    if isinstance(hit, _transcripts.TranscriptHit):
        return ("p", hit.pid)
    return ("s", hit.sid)


def _aligned(
    index: LayoutIndex,
    query: str,
    embedder: _vectors.Embedder,
    hits: list[AnyHit],
    pinned: set[int],
) -> list[AnyHit]:
    """``hits`` (fused order) with the first ``_align.DEPTH`` re-ranked by ``_align``, except
    the ``pinned`` places (hits BM25 is sure of: they hold the query's rare words — an
    identifier, an error code — which no paraphrase needs a second look for), which keep
    theirs. Each re-ranked hit's ``score`` is its place's value, above every hit not reached."""
    if not ALIGN or len(hits) < 2:
        return hits
    head = hits[: _align.DEPTH]
    bodies = _section_bodies(index, [h.sid for h in head if isinstance(h, _search.Hit)])
    texts = [
        h.text if isinstance(h, _transcripts.TranscriptHit) else bodies.get(h.sid, h.snippet)
        for h in head
    ]
    aligned = _align.scores(_vectors.aligner(embedder), query, texts, _rarity(index, query))
    if len(aligned) < 2:
        return hits
    moving = [n for n in range(len(aligned)) if n not in pinned]
    order = _align.reorder([head[n].score for n in moving], [aligned[n] for n in moving])
    placed = iter(moving[i] for i in order)
    floor = max((h.score for h in hits[len(aligned) :]), default=0.0)
    top = len(aligned)
    reranked = [
        replace(head[n if n in pinned else next(placed)], score=round(floor + top - n, 6))
        for n in range(top)
    ]
    return reranked + hits[len(aligned) :]


def _rarity(index: LayoutIndex, query: str) -> dict[str, float]:
    """Each matched word of ``query`` (``_align.query_words``) weighed by its rarity: the idf of its
    term among the transcript passages (the largest idf for a word no passage holds), over
    the mean of those; empty (every word 1) when the transcript tier is empty."""
    total = passage_count(index)
    if not total:
        return {}
    asked = dict.fromkeys(_align.query_words(query))
    terms = {w: _search.query_terms(index.conn, w) for w in asked}
    weight = _transcripts.weights(
        index.conn, sorted({t for ts in terms.values() for t in ts}), total
    )
    top = _transcripts.idf(total, 0)
    found = {w: max((weight.get(t, top) for t in ts), default=0.0) for w, ts in terms.items()}
    mean = sum(found.values()) / len(found) if found else 0.0
    return {w: v / mean for w, v in found.items()} if mean > 0 else {}


def _section_bodies(index: LayoutIndex, sids: list[int]) -> dict[int, str]:
    """The heading and text of the sections ``sids`` (by id), as the index holds them."""
    if not sids:
        return {}
    marks = ",".join("?" * len(sids))
    rows = index.conn.execute(
        f"SELECT rowid, heading, body FROM sections_fts WHERE rowid IN ({marks})", sids
    )
    return {int(r[0]): f"{r[1] or ''}\n{r[2] or ''}".strip() for r in rows}


def _bm25_sureness(
    index: LayoutIndex,
    distilled: list[_search.Hit],
    lexical: list[_transcripts.TranscriptHit],
    terms: set[str],
    total: int,
) -> tuple[dict[int, float], dict[int, float]]:
    """How much each BM25 hit's place counts in the fusion (by section id, by passage id):
    ``BM25_SURENESS`` times the share of the query's weight (idf) the hit holds — what a
    distilled hit shows, the terms a passage holds (``_transcripts.coverage``) — at most 1.
    A hit holding the query's rare words (an identifier, an error code, a name) is sure; one
    holding only its common words is BM25's noise for a question worded unlike the memory."""
    if not BM25_SURENESS:
        return {h.sid: 1.0 for h in distilled}, {h.pid: 1.0 for h in lexical}
    weight = _transcripts.weights(index.conn, sorted(terms), total)
    shown = _shown_terms(index, distilled, terms)

    def sure(matched: frozenset[str]) -> float:
        return min(1.0, BM25_SURENESS * _transcripts.coverage(matched, weight))

    return (
        {h.sid: sure(shown.get(h.sid, frozenset())) for h in distilled},
        {h.pid: sure(h.matched) for h in lexical},
    )


def passage_count(index: LayoutIndex) -> int:
    """How many passages the transcript tier holds (kept in meta while unchanged)."""
    stored = index._meta("passages")
    if isinstance(stored, int):
        return stored
    total = _transcripts.count(index.conn)
    index._set_meta("passages", total)
    return total


def _transcript_hit(
    index: LayoutIndex,
    hit: _transcripts.TranscriptHit,
    terms: list[str],
    weight: dict[str, float],
    summaries: dict[str, str],
) -> SearchHit:
    top = _search._Top(0, "", 1, None, "", hit.text, hit.score, 0)
    found = _search._best_lines(index.conn, terms, [weight[t] for t in terms], [top])
    snippet = found.get(0, (1, _search._snippet(hit.text.split("\n", 1)[0])))[1]
    return SearchHit(
        path=index.paths.rollout_file(hit.rollout_id),
        line=hit.segment,
        score=round(hit.score, 6),
        snippet=snippet,
        heading=hit.kind,
        tier="transcript",
        rollout_id=hit.rollout_id,
        segment=hit.segment,
        summary_file=summaries.get(hit.rollout_id),
        text=hit.text,
    )


def search_info(index: LayoutIndex) -> SearchInfo:
    """How search ranks now (no model is loaded to tell) and how much of what the index holds
    has vectors."""
    try:
        choice = _vectors.choice()
    except UserError as exc:  # SANDMEM_SEARCH=hybrid without the extra, or a bad value
        return SearchInfo(ranking="bm25", reason=str(exc))
    found = _vectors.counts(index.conn, index.paths.memories_dir)
    stored = index._meta("embedder")
    return SearchInfo(
        ranking=choice.mode,
        model=choice.model,
        reason=choice.reason or None,
        embeddable=found["sections"] + found["passages"],
        embedded=found["sections_embedded"] + found["passages_embedded"],
        vectors=found["vectors"],
        model_of_vectors=stored if isinstance(stored, str) and found["vectors"] else None,
    )
