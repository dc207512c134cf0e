"""The second stage of hybrid search: the first hits re-ranked by how well their phrases
answer the question's phrases.

One vector per text blurs the parts of a statement together: "the nightly billing export job
times out after 45 seconds" and "the weekly billing export job retries 9 times" are close, and
the model cannot tell which one "how long can the overnight invoicing dump task run?" asks
for. Here each content phrase of the question (its words without ``_STOPWORDS``, one to
``MAX_WORDS`` in a row: "overnight", "invoicing dump", "invoicing dump task") is matched to the
nearest phrase of a hit's sentence by the same model, and the sentence scores as the mean of
those best matches: every part of the question must be answered somewhere in it, each by its
own nearest phrase. A hit scores as its best sentence.

Figure 14 of ``BENCHMARKS.md`` measures it (the shipped hybrid row against "the fusion
alone"). The fused place still counts (``KEEP``: both as z-scores over the re-ranked hits), and
a hit BM25 is sure of (``_index_search``: it holds at least half the query's idf weight, such as
an identifier) keeps its place.

Phrase vectors are kept only in this process (``_cache``, bounded): nothing new reaches disk,
so ``forget`` and ``redact-history`` have nothing more to reach. A search spends at most
``BUDGET_S`` embedding phrases; the hits it did not reach keep their fused order after the
re-ranked ones.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sandmem.memory.views._vectors import SENTENCE

if TYPE_CHECKING:
    from sandmem.memory.views._vectors import Embedder

#: how many of the fused hits are re-ranked
DEPTH = 30
#: seconds one search may spend embedding phrases
BUDGET_S = 1.5
#: the weight of the fused place against the alignment (both z-scores over the re-ranked hits)
KEEP = 0.5
#: a phrase is one to this many content words in a row
MAX_WORDS = 3
#: a question's first this many content words are matched (its phrases are embedded before
#: the budget is looked at: a long question must not cost more than a short one)
QUERY_WORDS = 24
#: a hit's sentences looked at: at most this many, from at most this many characters
MAX_SENTENCES = 20
MAX_CHARS = 4000
#: phrases embedded per model call: the budget is looked at between calls, so one hit with
#: many sentences can overrun it by one call at most
CHUNK = 64
#: phrase vectors kept in the process (dropped all at once past this)
CACHE_SIZE = 200_000
#: words that say nothing of their own
_STOPWORDS = frozenset(
    "a about after all also an and any are as at be been before by can could did do does done "
    "each for from had has have he her here his how i if in into is it its just may me might "
    "more most my no not now of on or other our out she should so some such than that the "
    "their them then there these they this those to too up very was we were what when where "
    "which who whom whose why will with would you your".split()
)
_WORD = re.compile(r"[^\W_][\w'/.-]*[^\W_]|[^\W_]")

_lock = threading.Lock()
_cache: dict[tuple[str, str], Sequence[float]] = {}


def words(text: str) -> list[str]:
    """The content words of ``text``, lower case, in order (``_STOPWORDS`` left out)."""
    return [w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOPWORDS]


def query_words(query: str) -> list[str]:
    """The words of a question that are matched: its first ``QUERY_WORDS`` content words."""
    return words(query)[:QUERY_WORDS]


def phrases(text: str) -> list[str]:
    """The content phrases of ``text``: its ``words`` and every run of two to ``MAX_WORDS``
    of them, in order, each once."""
    words_ = words(text)
    found: dict[str, None] = {}
    for size in range(1, MAX_WORDS + 1):
        for start in range(len(words_) - size + 1):
            found.setdefault(" ".join(words_[start : start + size]))
    return list(found)


def sentences(text: str) -> list[str]:
    """The sentences of a hit that are scored (``MAX_SENTENCES`` of its first ``MAX_CHARS``)."""
    parts = (p.strip() for p in SENTENCE.split(text[:MAX_CHARS]))
    return [p for p in parts if p][:MAX_SENTENCES]


def _vectors(embedder: Embedder, wanted: list[str], deadline: float | None = None) -> bool:
    """Embed the phrases of ``wanted`` not in the cache yet, ``CHUNK`` at a time; ``False``
    when ``deadline`` (``time.monotonic``) passed before they all were."""
    with _lock:
        missing = [p for p in dict.fromkeys(wanted) if (embedder.name, p) not in _cache]
    for start in range(0, len(missing), CHUNK):
        if deadline is not None and time.monotonic() > deadline:
            return False
        chunk = missing[start : start + CHUNK]
        made = embedder.passages(chunk)
        with _lock:
            if len(_cache) + len(chunk) > CACHE_SIZE:
                _cache.clear()
            for phrase, vector in zip(chunk, made, strict=True):
                _cache[(embedder.name, phrase)] = vector
    return True


def _matrix(embedder: Embedder, items: list[str]) -> object:
    import numpy as np

    with _lock:
        rows = [_cache.get((embedder.name, p)) for p in items]
    if any(r is None for r in rows):
        return None
    matrix = np.asarray(rows, dtype=np.float32)
    if matrix.shape != (len(items), embedder.dim) or not np.all(np.isfinite(matrix)):
        return None
    return matrix


def scores(
    embedder: Embedder,
    query: str,
    texts: Sequence[str],
    rarity: Mapping[str, float] | None = None,
    budget_s: float | None = None,
) -> list[float]:
    """How well each of ``texts`` answers ``query``, phrase by phrase (higher is better), for
    the first texts reached within ``budget_s`` (default ``BUDGET_S``): the list may be
    shorter than ``texts`` (empty when the query has no content phrase). A question phrase
    weighs as the mean ``rarity`` of its words (1 for a word not in it): an identifier only
    one text holds counts for more than the words many share."""
    import numpy as np

    asked = phrases(" ".join(query_words(query)))
    if not asked:
        return []
    known = rarity or {}
    weight = np.asarray(
        [sum(known.get(w, 1.0) for w in p.split()) / len(p.split()) for p in asked],
        dtype=np.float64,
    )
    if not np.all(np.isfinite(weight)) or float(weight.sum()) <= 0:
        weight = np.ones(len(asked))
    weight = weight / weight.sum()
    budget = BUDGET_S if budget_s is None else budget_s
    started = time.monotonic()
    _vectors(embedder, asked)
    question = _matrix(embedder, asked)
    if question is None:
        return []
    found: list[float] = []
    for text in texts:
        if time.monotonic() - started > budget:
            break
        parts = [p for p in (phrases(s) for s in sentences(text)) if p]
        if not _vectors(embedder, [p for ps in parts for p in ps], started + budget):
            break
        best = 0.0
        for said in parts:
            answer = _matrix(embedder, said)
            if answer is None:
                continue
            sims = np.asarray(question) @ np.asarray(answer).T
            best = max(best, float(sims.max(axis=1) @ weight))
        found.append(best)
    return found


def reorder(fused: Sequence[float], aligned: Sequence[float], keep: float = KEEP) -> list[int]:
    """The order (indices into ``aligned``) of the first ``len(aligned)`` hits by
    ``z(aligned) + keep * z(fused)``; ties keep the fused order."""
    import numpy as np

    n = len(aligned)
    if n < 2:
        return list(range(n))

    def z(values: Sequence[float]) -> object:
        array = np.asarray(values, dtype=np.float64)
        spread = float(array.std())
        return (array - array.mean()) / spread if spread > 0 else np.zeros_like(array)

    combined = np.asarray(z(aligned)) + keep * np.asarray(z(list(fused[:n])))
    return [int(i) for i in np.argsort(-combined, kind="stable")]
