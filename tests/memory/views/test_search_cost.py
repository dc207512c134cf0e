"""What bounds one search's cost on a large memory, and what that must not cost:

- the quick check: a search does not list a tier's large directory (the rollout summaries, the
  rollout files) when its mtime is the one kept at the last full listing — and a change by
  another writer (an append through sandmem in another process, a file created, removed or
  replaced by hand) is still seen at once; an edit in place by hand at the next full listing;
- the scan budget: the query terms that fit rank every section holding them, and the best of
  those are scored again with every term, so the hits are the full ranking's, in its order,
  with its scores;
- the pending-vectors cursor: every row is embedded once across batches, never rescanned."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sqlite3
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_doubles import transcript_turn as turn
from memory_doubles import transcripts_workspace as workspace

from sandmem import memory as api
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, _files, recording
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.views import _index, _search, _transcripts, _vectors
from sandmem.memory.views._index import INDEX_NAME
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

PATHS = MemoryPaths("memories", "sessions")
EXTRACT = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
SUMMARIES = Path(PATHS.summaries_dir)


def age_all(root: Path, seconds: float = 120.0) -> None:
    """Date every file *and directory* back, so the index trusts both (a directory whose
    mtime moved within the last two seconds is always listed)."""
    past = time.time() - seconds
    for path in [*root.rglob("*"), root]:
        if not path.is_symlink():
            os.utime(path, (past, past))


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The directories each search lists (``Listing`` field names), in order."""
    names: list[str] = []
    real = _index.list_into

    async def spy(session: Any, paths: Any, listing: Any, name: str) -> None:
        names.append(name)
        await real(session, paths, listing, name)

    monkeypatch.setattr(_index, "list_into", spy)
    return names


def layout(tmp_path: Path) -> Path:
    root = workspace(
        tmp_path,
        {
            "ci": turn("ci", "Set up CI for the billing service", "CI runs on every push."),
            "docs": turn("docs", "Write the README", "The README is written."),
        },
    )
    (root / SUMMARIES).mkdir()
    (root / SUMMARIES / "ci_setup.md").write_text("# Set up CI\n\n- CI uses the runner pool.\n")
    (root / PATHS.memory_md).write_text("# Memory\n\n## CI\n- CI is on every push.\n")
    age_all(root)
    return root


async def found(root: Path, query: str) -> set[str]:
    """The paths of the hits, and the text of each transcript hit."""
    hits = (await api.search(root, query)).hits
    return {h.path for h in hits} | {h.text or "" for h in hits}


async def settle(root: Path, listed: list[str]) -> None:
    """One search with every directory listed (it keeps the quick records), then one that
    lists neither large directory."""
    await api.search(root, "warm")
    listed.clear()
    await api.search(root, "runner pool")
    assert "summaries" not in listed and "sessions" not in listed, listed
    listed.clear()


async def test_an_unchanged_layout_lists_no_large_directory_and_still_finds(
    tmp_path: Path, listed: list[str]
) -> None:
    root = layout(tmp_path)
    await api.search(root, "warm")
    assert {"summaries", "sessions"} <= set(listed)
    await settle(root, listed)
    assert f"{PATHS.summaries_dir}/ci_setup.md" in await found(root, "runner pool")
    assert any("every push" in t for t in await found(root, "every push"))
    assert "summaries" not in listed and "sessions" not in listed


async def record_elsewhere(script: str, *args: str) -> None:
    """Run ``script`` in another Python process (it records one segment)."""
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", script, *args)
    assert await asyncio.wait_for(process.wait(), 120) == 0


async def test_an_append_by_another_process_is_seen_at_once(
    tmp_path: Path, listed: list[str]
) -> None:
    root = layout(tmp_path)
    script = textwrap.dedent(
        f"""
        import asyncio, json, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from memory_doubles import transcript_turn
        from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig
        from sandmem.memory.generation._attach import get_manager
        from sandmem.memory.layout import MemoryPaths
        from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

        async def main(word, minute):
            client = UnixLocalSandboxClient()
            session = await client.create(manifest=Manifest(root={str(root)!r}))
            async with session:
                config = MemoryGenerateConfig(
                    phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE
                )
                manager = get_manager(session, MemoryPaths("memories", "sessions"), config)
                manager.detach_stop_hook()
                line = transcript_turn("ci", f"Pin {{word}} to 2.1", f"Pinned {{word}}.", minute)
                await manager.record(json.loads(line))

        asyncio.run(main(sys.argv[1], int(sys.argv[2])))
        """
    )
    # a first record makes what recording needs (its lock): then only the append changes
    await record_elsewhere(script, "walrus", "1")
    age_all(root)
    await settle(root, listed)
    before = (root / PATHS.sessions_dir / "ci.jsonl").stat().st_size
    await record_elsewhere(script, "zanzibar", "2")
    assert (root / PATHS.sessions_dir / "ci.jsonl").stat().st_size > before  # appended in place
    assert any("zanzibar" in t for t in await found(root, "zanzibar"))


async def test_a_recorder_moves_the_directory_mtime_at_most_once_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = layout(tmp_path)
    marks: list[str] = []
    real = _files.mark_changed

    async def counting(session: Any, directory: str) -> None:
        marks.append(directory)
        await real(session, directory)

    monkeypatch.setattr(_files, "mark_changed", counting)
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    async with session:
        manager = get_manager(session, PATHS, EXTRACT)
        manager.detach_stop_hook()
        before = (root / PATHS.sessions_dir).stat().st_mtime_ns
        for minute in range(3):  # within a second: one mark
            await manager.record(json.loads(turn("ci", f"Step {minute}", "ok", minute)))
        assert marks == [PATHS.sessions_dir]
        assert (root / PATHS.sessions_dir).stat().st_mtime_ns > before
        assert not (root / PATHS.sessions_dir / _files.CHANGE_MARK).exists()
        monkeypatch.setattr(recording, "MARK_EVERY_NS", 0)
        await manager.record(json.loads(turn("ci", "Step 9", "ok", 9)))
        assert len(marks) == 2


async def test_files_created_replaced_or_removed_by_hand_are_seen_at_once(
    tmp_path: Path, listed: list[str]
) -> None:
    root = layout(tmp_path)
    await settle(root, listed)
    # a rollout summary created by hand
    (root / SUMMARIES / "docs_readme.md").write_text("# README\n\n- Mention the quokka.\n")
    assert f"{PATHS.summaries_dir}/docs_readme.md" in await found(root, "quokka")
    age_all(root)
    await settle(root, listed)
    # replaced (an editor's save: a new file renamed over the old one)
    tmp = root / SUMMARIES / "tmp-save"
    tmp.write_text("# README\n\n- Mention the wombat.\n")
    tmp.replace(root / SUMMARIES / "docs_readme.md")
    assert f"{PATHS.summaries_dir}/docs_readme.md" in await found(root, "wombat")
    assert f"{PATHS.summaries_dir}/docs_readme.md" not in await found(root, "quokka")
    age_all(root)
    await settle(root, listed)
    # a rollout file removed by hand: its passages go
    (root / PATHS.sessions_dir / "docs.jsonl").unlink()
    assert not any("README is written" in t for t in await found(root, "README written"))


async def test_an_edit_in_place_is_seen_at_the_next_full_listing(
    tmp_path: Path, listed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = layout(tmp_path)
    await settle(root, listed)
    summary = root / SUMMARIES / "ci_setup.md"
    dir_stat = (root / SUMMARIES).stat()
    with summary.open("r+b") as file:  # in place: the directory's mtime does not move
        text = file.read().replace(b"runner pool", b"gerbil farm")
        file.seek(0)
        file.write(text)
    assert (root / SUMMARIES).stat().st_mtime_ns == dir_stat.st_mtime_ns
    monkeypatch.setattr(_index, "FULL_CHECK_S", 0.0)  # the full listing is due
    assert f"{PATHS.summaries_dir}/ci_setup.md" in await found(root, "gerbil farm")
    assert "summaries" in listed
    assert f"{PATHS.summaries_dir}/ci_setup.md" not in await found(root, "runner pool")


async def test_the_quick_check_is_not_trusted_when_it_cannot_tell(
    tmp_path: Path, listed: list[str]
) -> None:
    root = layout(tmp_path)
    await settle(root, listed)
    # the tier's digest withdrawn (as a forged row found by a search does): full listing
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    conn.execute("DELETE FROM meta WHERE key IN ('search_digest', 'transcripts_digest')")
    conn.commit()
    conn.close()
    await api.search(root, "runner pool")
    assert {"summaries", "sessions"} <= set(listed)
    # a subdirectory (a file created inside it would not move the directory's mtime)
    (root / SUMMARIES / "nested").mkdir()
    (root / SUMMARIES / "nested" / "more.md").write_text("# More\n\n- Ask the ocelot.\n")
    age_all(root)
    for _ in range(2):
        listed.clear()
        await api.search(root, "warm")
        assert "summaries" in listed
    (root / SUMMARIES / "nested" / "late.md").write_text("# Late\n\n- Feed the capybara.\n")
    assert f"{PATHS.summaries_dir}/nested/late.md" in await found(root, "capybara")


async def test_a_directory_changed_within_two_seconds_is_listed_every_time(
    tmp_path: Path, listed: list[str]
) -> None:
    root = layout(tmp_path)
    (root / SUMMARIES / "new.md").write_text("# New\n\n- The kiwi ships.\n")  # mtime: now
    for _ in range(2):
        listed.clear()
        await api.search(root, "kiwi")
        assert "summaries" in listed


# ---------------------------------------------------------------- the scan budget


def test_within_budget_takes_the_rarest_terms_that_fit() -> None:
    within = _search.within_budget
    assert within([5, 1, 3], 100) == [0, 1, 2]  # all fit
    assert within([5, 1, 3], 4) == [1, 2]  # rarest first, in query order
    assert within([5, 1, 3], 1) == [1]
    assert within([50, 70], 10) == [0]  # the rarest present one always
    assert within([0, 7, 0], 1) == [1]  # absent terms are left out
    assert within([0, 0], 10) == []
    assert within([2, 2, 2], 4) == [0, 1]  # ties in query order
    assert within([], 10) == []


WORDS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "the", "and", "to")


@given(
    sections=st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), max_size=3),
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=15),
        ),
        min_size=1,
        max_size=30,
    ),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
    budget=st.integers(min_value=1, max_value=40),
)
@settings(max_examples=40, deadline=None)
def test_a_budgeted_ranking_is_the_full_ranking_of_its_candidates(
    sections: list[tuple[list[str], list[str]]], query: list[str], budget: int
) -> None:
    text = "\n".join(
        f"## {' '.join(title) or 'untitled'}\n{' '.join(body)}\n" for title, body in sections
    )
    files = {"memories/MEMORY.md": text}
    question = " ".join(query)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_search, "SCAN_BUDGET", 10**9)
        full = _search.search_memory(files, question, 100)
        patch.setattr(_search, "SCAN_BUDGET", budget)
        patch.setattr(_search, "RESCORE_DEPTH", 1000)  # every candidate scored again
        budgeted = _search.search_memory(files, question, 100)
    # the terms that fit the budget select; the budgeted hits are exactly the full ranking's
    # hits holding one of them (same line, snippet and score), in its order
    conn = _search._connect()
    try:
        _search.add_file(conn, "memories/MEMORY.md", text)
        _search.fill_lengths(conn)
        terms = _search.query_terms(conn, question)
        counts = [n for _, n in _search._counts(conn, terms)]
    finally:
        conn.close()
    kept = {terms[i] for i in _search.within_budget(counts, budget)}
    assert budgeted == [hit for hit in full if hit.matched & kept]
    assert [h.matched for h in budgeted] == [h.matched for h in full if h.matched & kept]


def test_a_common_word_orders_the_candidates_it_cannot_select(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = {
        "memories/MEMORY.md": (
            "## one\nzebra\n\n## two\nzebra deploy deploy deploy\n\n"
            + "".join(f"## filler {n}\ndeploy\n\n" for n in range(5))
            + "".join(f"## other {n}\nnothing here\n\n" for n in range(40))
        )
    }
    alone = _search.search_memory(files, "zebra", 10)
    assert [h.heading for h in alone] == ["one", "two"]
    full = _search.search_memory(files, "zebra deploy", 10)
    monkeypatch.setattr(_search, "SCAN_BUDGET", 3)  # "deploy" (8 occurrences) does not fit
    hits = _search.search_memory(files, "zebra deploy", 10)
    assert [h.heading for h in hits] == ["two", "one"]  # only zebra's sections; deploy orders
    assert hits == [h for h in full if "zebra" in h.matched]
    assert hits[0].matched == {"zebra", "deploi"}  # stemmed


def passages_index(texts: list[tuple[str, str]]) -> sqlite3.Connection:
    """An index connection whose transcript tier holds one conversation of these turns."""
    conn = _index._connect(None)
    _search.scratch(conn)
    _transcripts.scratch(conn)
    _vectors.scratch(conn)
    lines = [turn("r", user, answer, n % 60).rstrip("\n").encode() for n, (user, answer) in
             enumerate(texts)]  # fmt: skip
    _transcripts.add_lines(conn, "r", 1, lines, str)
    return conn


@given(
    texts=st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=20).map(" ".join),
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=30).map(" ".join),
        ),
        min_size=1,
        max_size=40,
    ),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join),
)
@settings(max_examples=25, deadline=None)
def test_transcript_passages_ranked_again_score_as_fts5_does(
    texts: list[tuple[str, str]], query: str
) -> None:
    conn = passages_index(texts)
    try:
        words = _transcripts.query_words(query, 32)
        stems = _transcripts.stems(conn, words)
        df = _transcripts.doc_counts(conn, sorted({t for found in stems for t in found}))
        expression = " OR ".join(f'"{w}"' for w in words)
        ranked = conn.execute(
            "SELECT rowid, rank FROM passages_fts WHERE passages_fts MATCH ? ORDER BY rank",
            (expression,),
        ).fetchall()
        text = _transcripts.bodies(conn, [int(pid) for pid, _ in ranked])
        rows = [(pid, text[int(pid)], rank) for pid, rank in ranked]
        again = _transcripts.rescored(conn, rows, stems, df)
        assert again is not None
        fts5 = {int(r[0]): float(r[2]) for r in rows}
        assert len(again) == len(rows)
        for pid, _, score in again:
            assert score == pytest.approx(fts5[pid], rel=1e-12, abs=1e-12)
        assert [s for _, _, s in again] == sorted(s for _, _, s in again)
    finally:
        conn.close()


def test_a_word_past_the_transcript_budget_still_orders_the_passages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = [("zebra", "ok"), ("zebra deploy deploy deploy", "ok")]
    texts += [("deploy", "ok")] * 6 + [("nothing here", "ok")] * 40
    conn = passages_index(texts)
    try:
        total = _transcripts.count(conn)
        full = _transcripts.rank(conn, "zebra deploy", 10, 32, total)
        monkeypatch.setattr(_transcripts, "SCAN_BUDGET", 3)  # "deploy" does not fit
        hits = _transcripts.rank(conn, "zebra deploy", 10, 32, total)
        assert [h.text for h in hits] == ["zebra deploy deploy deploy", "zebra"]
        assert [(h.text, h.score) for h in hits] == [
            (h.text, pytest.approx(h.score)) for h in full if "zebra" in h.matched
        ]
        alone = _transcripts.rank(conn, "zebra", 10, 32, total)  # what zebra alone says
        assert [h.text for h in alone] == ["zebra", "zebra deploy deploy deploy"]
    finally:
        conn.close()


def test_the_averages_record_is_read_as_fts5_writes_it() -> None:
    assert _transcripts._varint(bytes([0x05]), 0) == (5, 1)
    assert _transcripts._varint(bytes([0x81, 0x00]), 0) == (128, 2)
    assert _transcripts._varint(bytes([0xFF] * 8 + [0x01]), 0) == ((2**56 - 1) << 8 | 1, 9)
    with pytest.raises(IndexError):
        _transcripts._varint(bytes([0x81]), 0)
    conn = passages_index([("one two three", "four")])
    try:
        conn.commit()  # FTS5 writes its record when its pending rows are flushed
        assert _transcripts._averages(conn) == (2, 2.0)  # two passages, four tokens
        conn.execute("UPDATE passages_fts_data SET block = x'81' WHERE id = 1")  # cut short
        assert _transcripts._averages(conn) is None
    finally:
        conn.close()


# ---------------------------------------------------------------- the pending-vectors cursor


class CountingEmbedder:
    name = "counting v1"
    dim = 4

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def passages(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded += texts
        return [[1.0, float(len(t) % 7), 0.5, float(n % 3)] for n, t in enumerate(texts)]

    def query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]


async def test_pending_rows_are_embedded_once_in_batches_that_never_rescan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("numpy")
    conn = _index._connect(None)
    _search.scratch(conn)
    _transcripts.scratch(conn)
    _vectors.scratch(conn)
    _search.add_file(
        conn, "memories/MEMORY.md", "".join(f"## Topic {n}\nFact number {n}.\n" for n in range(9))
    )
    _search.fill_lengths(conn)
    lines = [
        turn("r", f"Question {n} about the cache", f"Answer {n}: raise the timeout.", n).encode()
        for n in range(8)
    ]
    _transcripts.add_lines(conn, "r", 1, [line.rstrip(b"\n") for line in lines], str)
    monkeypatch.setattr(_vectors, "BATCH", 3)
    calls: list[tuple[str, int | None, list[int]]] = []
    for name in ("_pending_sections", "_pending_passages"):
        real = getattr(_vectors, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            rows = _real(*args)
            calls.append((_name, args[3] if len(args) > 3 else None, [r[0] for r in rows]))
            return rows

        monkeypatch.setattr(_vectors, name, spy)
    embedder = CountingEmbedder()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    made, done = await _vectors.embed_pending(conn, embedder, None, lambda: None, "memories")
    conn.set_trace_callback(None)
    # each batch's query walks the table by id, never scans the whole full-text table
    pending = [sql for sql in statements if "NOT EXISTS" in sql]
    assert len(pending) > 4
    for sql in pending:
        plan = [str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
        assert plan[0].startswith(("SCAN p", "SEARCH p", "SCAN s", "SEARCH s")), plan  # outer
        if "sections_fts" in sql:  # a passage's text is read from its block afterwards
            assert "SCAN f VIRTUAL TABLE INDEX 0:=" in plan, plan  # a text fetched by its rowid
        else:
            assert not any("VIRTUAL TABLE" in step for step in plan), plan
        assert not any("TEMP B-TREE" in step for step in plan), plan  # no sort of every row
    assert done and made == len(set(embedder.embedded)) == len(embedder.embedded)
    for name, order in (("_pending_sections", 1), ("_pending_passages", -1)):
        batches = [(after, ids) for n, after, ids in calls if n == name]
        ids = [i for _, found in batches for i in found]
        assert len(ids) == len(set(ids)) and len(batches) > 2  # each row in one batch
        assert ids == sorted(ids, key=lambda i: order * i)  # ascending / newest first
        assert batches[0][0] is None
        for (_, before), (after, _) in itertools.pairwise(batches):
            assert before and after == before[-1]  # the next batch starts after the last row
    # every row that gets a vector has its refs, none twice
    sections = conn.execute("SELECT count(*) FROM sections").fetchone()[0]
    dup = conn.execute(
        "SELECT count(*) FROM (SELECT tier, ref, key FROM vector_refs GROUP BY tier, ref, key "
        "HAVING count(*) > 1)"
    ).fetchone()[0]
    with_refs = conn.execute(
        "SELECT count(DISTINCT ref) FROM vector_refs WHERE tier = ?", (_vectors.SECTION,)
    ).fetchone()[0]
    assert dup == 0 and with_refs == sections
    again, done = await _vectors.embed_pending(conn, embedder, None, lambda: None, "memories")
    assert (again, done) == (0, True)
    conn.close()


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [("user", 0), ("assistant", 0), ("final output", 0)],
        [("tool output", 0), ("tool output", 1), ("tool output", 2)],
        [("tool call", 0), ("tool call", 1), ("reasoning", 0)],
        [(kind, part) for kind in ("user", "tool output", "tool call") for part in range(4)] * 5,
    ],
)
def test_status_counts_the_passages_that_get_vectors_without_reading_every_passage(
    rows: list[tuple[str, int]],
) -> None:
    conn = _index._connect(None)
    _transcripts.scratch(conn)
    _vectors.scratch(conn)
    conn.executemany("INSERT INTO passages (rid, segment, kind, part) VALUES ('r', 0, ?, ?)", rows)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    found = _vectors.counts(conn, "memories")
    conn.set_trace_callback(None)
    wanted = sum(
        kind in _vectors.PROSE_KINDS or (kind in _vectors.FIRST_ONLY_KINDS and part == 0)
        for kind, part in rows
    )
    assert found["passages"] == wanted
    # the passages are counted by seeking their kinds in an index, never by reading each one
    (count,) = [sql for sql in statements if "FROM passages" in sql]
    plan = [str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {count}")]
    assert sum("USING COVERING INDEX passages_kind (kind=?" in step for step in plan) == 2, plan
    assert not any(step.startswith("SCAN passages") for step in plan), plan
    conn.close()


def test_search_still_works_on_a_loop_after_the_quick_records(tmp_path: Path) -> None:
    """The sync twin (a fresh event loop per call) keeps and uses the quick records too."""
    root = layout(tmp_path)
    for _ in range(3):
        hits = api.search_sync(root, "runner pool").hits
        assert hits and hits[0].path == f"{PATHS.summaries_dir}/ci_setup.md"
