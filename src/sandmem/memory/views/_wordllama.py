"""WordLlama: the second model of the ``semantic`` extra, paired with e5 (``_vectors._E5Words``).

WordLlama (the ``wordllama`` package, MIT) ships inside its wheel a table of 256-wide token
vectors (``l2_supercat``, 16 MB, float16; trained by its author from the token embeddings of
large Llama-2-family models) and the tokenizer that goes with it. A text's vector is the mean
of its tokens' vectors, at unit length: no network, no transformer, microseconds a text. Alone
it ranks whole sentences worse than e5 (evidence@5 on figure 14's bare facts, seed 14: 0.540
against 0.704), but it knows synonyms e5 misses ("invoicing" nearest "billing", "memo store"
nearest "cache"), and the pair ranks better than either (figure 14 measures it).

Only the two data files are read, found through the installed distribution's metadata: the
package's own modules are never imported (importing ``wordllama`` configures the root logger
of the whole process, and its loader falls back to downloading from the Hugging Face Hub).
Both files are checked against the SHA-256 of the ones ``wordllama`` 0.4 ships before anything
is parsed: a changed or truncated file is refused, not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandmem._errors import UserError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Array = NDArray[np.float32]

DIST = "wordllama"
#: the two files read (path inside the distribution, size, SHA-256)
WEIGHTS = (
    "wordllama/weights/l2_supercat_256.safetensors",
    16_384_096,
    "64b47a2dc493cb8e85944076601189739852d7b64e0e1eedcb1937a251cd9fd5",
)
TOKENIZER = (
    "wordllama/tokenizers/l2_supercat_tokenizer_config.json",
    1_842_796,
    "93248f2a9ec36c7b35f700a033d5f36228aae48db61aee31007fa49062cdeb68",
)
#: the token table's name in the weights file, and its shape
TENSOR = "embedding.weight"
VOCAB, DIM = 32_000, 256
INSTALL_HINT = "pip install 'sandmem[semantic]' (it installs wordllama 0.4)"


def _paths() -> tuple[Path, Path] | None:
    """The installed weights and tokenizer files, or ``None`` when either is missing."""
    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        return None
    found = tuple(Path(str(dist.locate_file(name))) for name, _, _ in (WEIGHTS, TOKENIZER))
    if not all(p.is_file() for p in found):
        return None
    return found[0], found[1]


def installed() -> bool:
    """Whether the package and its two files are installed (nothing is read)."""
    return _paths() is not None


def read_checked(path: Path, size: int, sha256: str) -> bytes:
    """The bytes of ``path``, refused unless they are exactly the expected file. A link is
    followed (some installers lay a package out as links into a store): what is read is
    checked, wherever it is, so a link to other bytes is refused like any changed file."""
    from sandmem.memory.views._mpnet import read_pinned

    found = read_pinned(path, size, sha256, follow_links=True)
    if found is None:
        raise UserError(
            f"WordLlama's {path.name} cannot be read or is not the expected file; {INSTALL_HINT}"
        )
    return found


class Model:
    """Token vectors in, a text's unit vector out (the mean of its tokens' vectors)."""

    def __init__(self, table: Array, tokenizer: Any) -> None:
        self._table, self._tokenizer = table, tokenizer
        self.dim = int(table.shape[1])

    def embed(self, texts: Sequence[str]) -> Array:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encoded = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        counts = np.asarray([len(item.ids) for item in encoded], dtype=np.int64)
        has = counts > 0
        if not has.any():
            return out
        ids = np.concatenate([np.asarray(item.ids, dtype=np.int64) for item in encoded])
        known = (ids >= 0) & (ids < self._table.shape[0])  # an id past the table counts as none
        vectors = self._table[np.where(known, ids, 0)] * known[:, None]
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[has]
        out[has] = np.add.reduceat(vectors, starts, axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        # a text with no known token stays the zero vector: like nothing, not like everything
        np.divide(out, norms, out=out, where=norms > 0)
        return out


def load() -> Model:
    """Read, check and build the model from the installed package (~50 ms)."""
    from sandmem._extras import require

    np = require("numpy", "semantic")
    tokenizers = require("tokenizers", "semantic")
    from sandmem.memory.views._mpnet import parse_safetensors

    paths = _paths()
    if paths is None:
        raise UserError(f"WordLlama is not installed; install it with: {INSTALL_HINT}")
    tokenizer = tokenizers.Tokenizer.from_str(read_checked(paths[1], *TOKENIZER[1:]).decode())
    tokenizer.no_padding()
    tokenizer.no_truncation()
    try:
        table = parse_safetensors(read_checked(paths[0], *WEIGHTS[1:]))[TENSOR]
    except (ValueError, KeyError) as exc:  # the checked file is the known one: a bug, said plainly
        raise UserError(f"WordLlama's weights cannot be read: {exc}") from exc
    if table.shape != (VOCAB, DIM):
        raise UserError(f"WordLlama's token table is {table.shape}, not {(VOCAB, DIM)}")
    return Model(np.ascontiguousarray(table, dtype=np.float32), tokenizer)
