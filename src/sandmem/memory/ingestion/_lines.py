"""Reading a JSONL source: complete lines only, each bounded, in one streaming pass."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from sandmem.memory._json import loads_bounded
from sandmem.memory.ingestion._model import Line, SourceMeta
from sandmem.memory.ingestion._open import open_regular

#: a line longer than this is skipped (counted as ``oversized_line``) without being held
MAX_LINE_BYTES = 16 * 1024 * 1024
_CHUNK = 1024 * 1024
#: bytes before a recorded offset whose hash tells whether the file was only appended to
TAIL_BYTES = 1024


def decode_line(raw: bytes) -> dict[str, Any] | None:
    """A line's JSON object, or ``None`` (not UTF-8 JSON, not an object, too deep)."""
    try:
        value = loads_bounded(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


class ByteSource(Protocol):
    """What ``LineReader`` reads from: an open binary file, or a bounded view of one."""

    def read(self, size: int, /) -> bytes: ...


class LineReader:
    """Iterates over the complete lines of ``stream`` from its start. A last line without a
    newline counts only when it is a whole JSON object (a writer may still be adding to it);
    otherwise it is left for the next ingest (``pending_bytes`` says how much). Blank lines
    are skipped; a line over ``max_line_bytes`` (default ``MAX_LINE_BYTES``) comes as
    ``data=None`` and is counted as
    ``oversized_line`` in ``meta``."""

    def __init__(
        self, stream: ByteSource, meta: SourceMeta, max_line_bytes: int | None = None
    ) -> None:
        self.stream = stream
        self.meta = meta
        self.max_line_bytes = max_line_bytes
        self.pending_bytes = 0

    def _decode(self, raw: bytes) -> dict[str, Any] | None:
        data = decode_line(raw)
        if data is None:
            self.meta.drop("malformed_line")
        return data

    def __iter__(self) -> Iterator[Line]:
        limit = self.max_line_bytes or MAX_LINE_BYTES
        index = 0
        chunk_start = 0  # file offset of chunk[0]
        line_start = 0  # file offset where the current line begins
        buffer = bytearray()
        skipping = False  # inside a line over max_line_bytes: its bytes are not kept
        while chunk := self.stream.read(_CHUNK):
            start = 0
            while (newline := chunk.find(b"\n", start)) >= 0:
                line_end = chunk_start + newline + 1
                if not skipping:
                    buffer += chunk[start:newline]
                self.meta.position = index
                if skipping or len(buffer) > limit:
                    self.meta.drop("oversized_line")
                    yield Line(index, line_end, None)
                    index += 1
                elif buffer.strip():
                    yield Line(index, line_end, self._decode(bytes(buffer)))
                    index += 1
                skipping = False
                buffer.clear()
                line_start = line_end
                start = newline + 1
            if not skipping:
                buffer += chunk[start:]
                if len(buffer) > limit:
                    skipping = True
                    buffer.clear()
            chunk_start += len(chunk)
        if skipping:
            self.pending_bytes = chunk_start - line_start
        elif buffer.strip():
            data = decode_line(bytes(buffer))  # not counted: it may be unfinished
            self.meta.position = index
            if data is not None:
                yield Line(index, line_start + len(buffer), data)
            else:
                self.pending_bytes = len(buffer)


def tail_digest(path: Path, offset: int) -> str | None:
    """The SHA-256 of the ``TAIL_BYTES`` before ``offset`` in ``path`` (``None`` when the file
    is shorter than ``offset``): a recorded offset is still valid when this is unchanged."""
    start = max(0, offset - TAIL_BYTES)
    with open_regular(path) as stream:
        stream.seek(start)
        data = stream.read(offset - start)
    if len(data) != offset - start:
        return None
    return hashlib.sha256(data).hexdigest()
