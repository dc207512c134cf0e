"""The second stage of hybrid search (``_align``): the first fused hits re-ranked by how well
each phrase of the question is answered by a phrase of a hit's sentence; hits BM25 is sure of
keep their places; a bounded time; nothing new on disk.

The stand-in model is ``ConceptEmbedder`` (synonyms map to one concept); the last test uses
the real model when the extra is installed."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from memory_doubles import transcript_turn as turn
from memory_doubles import transcripts_workspace as workspace
from test_search_hybrid import ConceptEmbedder, near

from sandmem import memory as api
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.views import _align, _index_search, _vectors
from sandmem.memory.views._index import INDEX_NAME

pytest.importorskip("numpy")

PATHS = MemoryPaths("memories", "sessions")


# ---------------------------------------------------------------- phrases and sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the nightly export", ["nightly", "export", "nightly export"]),
        (
            "How long can the job run?",
            ["long", "job", "run", "long job", "job run", "long job run"],
        ),
        ("a of the", []),
        ("", []),
        # identifiers, paths and versions stay one word
        ("pin api-gw to 2.4.1", ["pin", "api-gw", "2.4.1", "pin api-gw", "api-gw 2.4.1",
                                  "pin api-gw 2.4.1"]),
        ("logs in /var/data/x-12", ["logs", "var/data/x-12", "logs var/data/x-12"]),
        # each phrase once, whatever the case
        ("Deploy deploy DEPLOY", ["deploy", "deploy deploy", "deploy deploy deploy"]),
    ],
)  # fmt: skip
def test_phrases_are_content_words_and_their_runs(text: str, expected: list[str]) -> None:
    assert _align.phrases(text) == expected


def test_a_phrase_is_at_most_max_words_long() -> None:
    found = _align.phrases("alpha beta gamma delta epsilon")
    assert max(len(p.split()) for p in found) == _align.MAX_WORDS
    assert len(found) == 5 + 4 + 3


def test_sentences_cut_at_stops_and_lines_and_are_bounded() -> None:
    assert _align.sentences("One. Two!\nThree? four") == ["One.", "Two!", "Three?", "four"]
    many = " ".join(f"Sentence {n}." for n in range(100))
    assert len(_align.sentences(many)) == _align.MAX_SENTENCES
    long = "word " * 5000 + ". tail sentence."
    assert all("tail" not in s for s in _align.sentences(long))  # past MAX_CHARS


# ---------------------------------------------------------------- scores


_made = iter(range(10**9))


def fresh() -> ConceptEmbedder:
    return ConceptEmbedder(name=f"concepts {next(_made)}")  # no phrase cached by a test before


QUESTION = "how long may an overnight invoicing dump task run"


def test_every_part_answered_beats_some_parts_answered() -> None:
    texts = [
        "The nightly billing export job times out after 45 seconds.",
        "The weekly billing export job times out after 45 seconds.",
        "The nightly shipping gateway listens on port 5433.",
    ]
    found = _align.scores(fresh(), QUESTION, texts)
    assert len(found) == 3
    assert found[0] > found[1] > found[2]


def test_a_hit_scores_as_its_best_sentence() -> None:
    fact = "The nightly billing export job times out after 45 seconds."
    filler = "Rename the helper. Add a test. Fix the lint."
    alone, inside = _align.scores(fresh(), QUESTION, [fact, f"{filler}\n{fact}\n{filler}"])
    assert inside == pytest.approx(alone)


def test_a_rare_word_counts_for_more_than_common_ones() -> None:
    query = "billing export E4412"
    texts = ["The nightly billing export job finished.", "Deploy stopped with E4412."]
    even = _align.scores(fresh(), query, texts)
    weighed = _align.scores(fresh(), query, texts, {"billing": 0.4, "export": 0.4, "e4412": 2.2})
    assert weighed[1] - weighed[0] > even[1] - even[0] + 0.1
    assert weighed[1] > even[1]


def test_a_long_question_costs_no_more_than_its_first_words() -> None:
    model = fresh()
    long = " ".join(f"word{n}" for n in range(2000))
    _align.scores(model, long, [], budget_s=60.0)
    first = " ".join(f"word{n}" for n in range(_align.QUERY_WORDS))
    assert sorted(model.embedded) == sorted(_align.phrases(first))


@pytest.mark.parametrize("query", ["", "   ", "the of a", "?!"])
def test_a_question_with_no_content_phrase_reranks_nothing(query: str) -> None:
    assert _align.scores(fresh(), query, ["The nightly export job."]) == []


def test_the_budget_bounds_how_many_hits_are_reached() -> None:
    texts = [f"The nightly billing export job {n} times out." for n in range(5)]
    assert _align.scores(fresh(), QUESTION, texts, budget_s=-1.0) == []
    assert len(_align.scores(fresh(), QUESTION, texts, budget_s=60.0)) == 5


class SlowEmbedder(ConceptEmbedder):
    """Each model call costs ``cost`` seconds of a fake clock (``_align``'s ``time``)."""

    def __init__(self, clock: list[float], cost: float) -> None:
        super().__init__(name=f"slow {next(_made)}")
        self.clock, self.cost, self.calls = clock, cost, 0

    def passages(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        self.clock[0] += self.cost
        return super().passages(texts)


@pytest.mark.parametrize(("chunk", "cost", "calls"), [(64, 1.0, 2), (16, 0.4, 4), (8, 0.5, 4)])
def test_one_hit_with_many_phrases_overruns_the_budget_by_one_call_at_most(
    monkeypatch: pytest.MonkeyPatch, chunk: int, cost: float, calls: int
) -> None:
    clock = [0.0]
    monkeypatch.setattr(_align.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(_align, "CHUNK", chunk)
    # 20 sentences of distinct words: hundreds of phrases in one hit
    text = "\n".join(f"Alpha{n} beta{n} gamma{n} delta{n} eps{n} zeta{n}." for n in range(20))
    assert len({p for s in _align.sentences(text) for p in _align.phrases(s)}) > 200
    model = SlowEmbedder(clock, cost)
    found = _align.scores(model, QUESTION, [text, text], budget_s=1.5)
    assert found == []  # the hit was not finished within the budget: not scored
    assert model.calls == calls  # the question's call, then chunks until the deadline passed
    assert clock[0] <= 1.5 + cost  # past the budget by one call at most


class BrokenEmbedder(ConceptEmbedder):
    """Returns vectors of the wrong size or not finite: a model must not crash search."""

    def __init__(self, value: float, size: int) -> None:
        super().__init__(name=f"broken {value} {size} {next(_made)}")
        self.value, self.size = value, size

    def passages(self, texts: Sequence[str]) -> list[list[float]]:
        return [[self.value] * self.size for _ in texts]


@pytest.mark.parametrize(("value", "size"), [(float("nan"), 64), (float("inf"), 64), (0.1, 3)])
def test_a_broken_model_reranks_nothing(value: float, size: int) -> None:
    assert _align.scores(BrokenEmbedder(value, size), QUESTION, ["The nightly job."]) == []


def test_phrases_are_embedded_once_per_process_and_the_cache_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = fresh()
    text = "The nightly billing export job times out."
    _align.scores(model, QUESTION, [text])
    first = len(model.embedded)
    assert first == len(set(_align.phrases(QUESTION)) | set(_align.phrases(text)))
    _align.scores(model, QUESTION, [text])
    assert len(model.embedded) == first
    monkeypatch.setattr(_align, "CACHE_SIZE", 5)
    _align.scores(fresh(), QUESTION, [text])
    assert len(_align._cache) <= first  # cleared before it grew past its bound


# ---------------------------------------------------------------- reorder


@pytest.mark.parametrize(
    ("fused", "aligned", "keep", "expected"),
    [
        ([3.0, 2.0, 1.0], [0.1, 0.2, 0.9], 0.0, [2, 1, 0]),  # alignment alone
        ([3.0, 2.0, 1.0], [0.5, 0.5, 0.5], 0.5, [0, 1, 2]),  # no spread: fused order
        ([3.0, 2.0, 1.0], [0.2, 0.2, 0.2], 0.0, [0, 1, 2]),  # ties keep the fused order
        ([3.0, 2.0, 1.0], [0.30, 0.31, 0.1], 5.0, [0, 1, 2]),  # the fused place dominates
        ([1.0], [0.9], 0.5, [0]),
        ([], [], 0.5, []),
    ],
)
def test_reorder_combines_both_as_z_scores(
    fused: list[float], aligned: list[float], keep: float, expected: list[int]
) -> None:
    assert _align.reorder(fused, aligned, keep) == expected


# ---------------------------------------------------------------- in search


FACTS = {
    "right": "The nightly billing export job times out after 45 seconds.",
    "cadence": "The weekly billing export job times out after 90 seconds.",
    "thing": "The nightly shipping gateway times out after 30 seconds.",
}


EXACT = "Deploy stopped with E4412 on staging."


def facts_layout(tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    files = {name: turn(name, f"Remember this: {fact}", "Noted.") for name, fact in FACTS.items()}
    return workspace(tmp_path, {**files, **(extra or {})})


async def test_search_reranks_by_alignment_and_keeps_what_bm25_is_sure_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 20 more texts holding the question's common words: the identifier is rare among them
    others = near(20, "The billing export run {n} finished.")
    root = facts_layout(tmp_path, {"exact": turn("exact", EXACT, "Noted."), **others})
    wanted: dict[str, float] = {"right": 0.1, "cadence": 0.9, "thing": 0.5}

    def spy(embedder: Any, query: str, texts: Sequence[str], *args: Any) -> list[float]:
        # the alignment the test decides: by which fact a text holds
        return [next((v for k, v in wanted.items() if FACTS[k] in t), 0.0) for t in texts]

    monkeypatch.setattr(_align, "KEEP", 0.0)
    monkeypatch.setattr(_align, "scores", spy)
    with _vectors.use_embedder(ConceptEmbedder()):
        found = await api.search(root, QUESTION)
        order = [h.rollout_id for h in found.hits if h.tier == "transcript"]
        assert order[:3] == ["cadence", "thing", "right"]
        scores = [h.score for h in found.hits]
        assert scores == sorted(scores, reverse=True)
        # an identifier BM25 is sure of (the hit holds at least half the query's rarity
        # weight: _bm25_sureness) keeps its place whatever the alignment says
        monkeypatch.setitem(FACTS, "exact", EXACT)
        wanted["exact"] = -5.0
        found = await api.search(root, "billing export E4412")
        monkeypatch.setattr(_index_search, "ALIGN", False)
        fused = await api.search(root, "billing export E4412")
        unranked = await api.search(root, QUESTION)
    place = [h.rollout_id for h in fused.hits].index("exact")
    assert place < 3
    assert [h.rollout_id for h in found.hits].index("exact") == place
    assert next(h.rollout_id for h in unranked.hits if h.tier == "transcript") == "right"


async def test_a_search_out_of_budget_keeps_the_fused_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = facts_layout(tmp_path)
    with _vectors.use_embedder(ConceptEmbedder()):
        monkeypatch.setattr(_index_search, "ALIGN", False)
        fused = await api.search(root, QUESTION)
        monkeypatch.setattr(_index_search, "ALIGN", True)
        monkeypatch.setattr(_align, "BUDGET_S", -1.0)
        starved = await api.search(root, QUESTION)
    assert [(h.rollout_id, h.text) for h in starved.hits] == [
        (h.rollout_id, h.text) for h in fused.hits
    ]


async def test_the_second_stage_writes_nothing_to_the_index(tmp_path: Path) -> None:
    root = facts_layout(tmp_path)
    with _vectors.use_embedder(ConceptEmbedder()):
        await api.search(root, "anything")  # the index and its vectors made
        conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
        try:
            before = conn.execute("SELECT count(*) FROM vectors").fetchone()
        finally:
            conn.close()
        await api.search(root, QUESTION)
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        assert conn.execute("SELECT count(*) FROM vectors").fetchone() == before
        phrase_key = _vectors.key_of("overnight invoicing")
        assert conn.execute("SELECT 1 FROM vectors WHERE key = ?", (phrase_key,)).fetchone() is None
    finally:
        conn.close()


async def test_the_real_model_tells_apart_facts_one_part_apart(
    tmp_path: Path, real_model: Any
) -> None:
    root = facts_layout(tmp_path)
    found = await api.search(root, QUESTION)
    assert found.ranking == "hybrid" and (await api.status(root)).search.model == real_model.name
    assert FACTS["right"] in (found.hits[0].text or "")
