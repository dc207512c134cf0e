"""Telling the transcript formats apart from their content.

A JSON Lines file is read line by line until a line settles its format — a Codex record, a
Claude Code entry, a Chat Completions tool message, a typed Responses item — or until
:data:`DETECT_MAX_BYTES` were read (a file of plain user/assistant messages is settled by its
end, or by that bound). A line over :data:`DETECT_MAX_LINE_BYTES` is passed over without being
held, so one huge first line (a pasted log) does not hide the lines after it. The ingest keeps
the format its first ingest of a source decided (see ``_ingest``): what this module says
matters only for a source seen for the first time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

from sandmem.memory.ingestion._claude import ENTRY_TYPES
from sandmem.memory.ingestion._codex import WRAPPER_TYPES
from sandmem.memory.ingestion._items import RESPONSES_TYPES, chat_shaped, looks_like_items
from sandmem.memory.ingestion._lines import LineReader, decode_line
from sandmem.memory.ingestion._model import SourceMeta
from sandmem.memory.ingestion._open import open_regular, read_regular
from sandmem.memory.ingestion._sqlite import SQLITE_MAGIC

Format = Literal["codex", "claude-code", "openai-agents", "responses", "chat"]
FORMATS: tuple[str, ...] = ("codex", "claude-code", "openai-agents", "responses", "chat")
#: the formats of plain item lists: one parser reads both shapes, the name only names the
#: conversation (``responses-<file>`` or ``chat-<file>``)
ITEM_FORMATS = ("responses", "chat")
#: bytes of a file read at most to tell its format
DETECT_MAX_BYTES = 8 * 1024 * 1024
#: a line longer than this is passed over by detection (not held in memory)
DETECT_MAX_LINE_BYTES = 4 * 1024 * 1024
#: JSON objects of a file's first lines kept to name its source session
IDENTITY_LINES = 50
_CHUNK = 256 * 1024
#: a JSON (not JSONL) document larger than this is refused: write it as JSONL
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024


@dataclass
class Detection:
    """What detection found: the format (``"document"`` for a JSON document to be parsed
    whole) or ``None`` and why not; ``objects`` are the JSON objects of the first lines and
    the one that settled the format (what names the source session)."""

    format: str | None
    why: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    sqlite: bool = False


class _Decider:
    """Fed a file's JSON objects in order; ``settled`` once one of them decides the format."""

    def __init__(self) -> None:
        self.objects: list[dict[str, Any]] = []
        self.settled: str | None = None
        self.count = 0
        self.known = 0
        self.first: dict[str, Any] | None = None

    def feed(self, obj: dict[str, Any]) -> None:
        self.count += 1
        if len(self.objects) < IDENTITY_LINES:
            self.objects.append(obj)
        if self.first is None:
            self.first = obj
        self.settled = _settles(obj)
        if self.settled is None and self.count == 2 and _early_codex(self.first):
            self.settled = "codex"  # an early Codex file: bare session meta, then bare items
        if self.settled is not None and obj not in self.objects:
            self.objects.append(obj)
        if looks_like_items([obj]):
            self.known += 1

    def verdict(self) -> str | None:
        if self.settled is not None:
            return self.settled
        if self.known > 0 and self.known >= self.count // 2:
            return "responses"
        return None


def _settles(obj: dict[str, Any]) -> str | None:
    kind = obj.get("type")
    if kind in WRAPPER_TYPES and "payload" in obj:
        return "codex"
    if (("sessionId" in obj or "parentUuid" in obj) and kind in ENTRY_TYPES) or (
        kind == "summary" and "leafUuid" in obj
    ):
        return "claude-code"
    if chat_shaped(obj):
        return "chat"
    if isinstance(kind, str) and kind != "message" and kind in RESPONSES_TYPES:
        return "responses"
    return None


def _early_codex(first: dict[str, Any]) -> bool:
    return "id" in first and "timestamp" in first and "type" not in first


def _decide(objects: Iterable[dict[str, Any] | None], start: bytes) -> Detection:
    decider = _Decider()
    for obj in objects:
        if obj is None:
            continue  # a garbage line among JSON lines is the parser's to skip and count
        decider.feed(obj)
        if decider.settled is not None:
            break
    found = decider.verdict()
    if found is not None:
        return Detection(found, "JSON Lines", decider.objects)
    text = start.lstrip()
    if not text:
        return Detection(None, "empty file")
    if b"\x00" in start:
        return Detection(None, "binary data (not JSON Lines, JSON or SQLite)")
    if text[:1] in (b"[", b"{"):
        return Detection("document", "a JSON document")
    return Detection(None, "no known transcript shape in its lines")


def sniff(head: bytes) -> tuple[str | None, str]:
    """The format of a file whose bytes (or first bytes) are ``head``, or ``None`` and why
    not (the pure form of :func:`detect`)."""
    if head.startswith(SQLITE_MAGIC):
        return "openai-agents", "a SQLite database"
    found = _decide((decode_line(raw) for raw in head.split(b"\n")), head[:_CHUNK])
    return found.format, found.why


def detect(path: Path) -> Detection:
    """The format of the file at ``path``, reading at most :data:`DETECT_MAX_BYTES`."""
    with open_regular(path) as stream:  # a FIFO in its place is refused, never waited on
        start = stream.read(_CHUNK)
        if start.startswith(SQLITE_MAGIC):
            return Detection("openai-agents", "a SQLite database", sqlite=True)
        stream.seek(0)
        bounded = _Bounded(stream, DETECT_MAX_BYTES)
        lines = LineReader(bounded, SourceMeta("detect"), DETECT_MAX_LINE_BYTES)
        return _decide((line.data for line in lines), start)


class _Bounded:
    """A binary stream that ends after its first ``left`` bytes."""

    def __init__(self, stream: BinaryIO, left: int) -> None:
        self.stream, self.left = stream, left

    def read(self, size: int, /) -> bytes:
        wanted = min(size, self.left)
        chunk = self.stream.read(wanted) if wanted > 0 else b""
        self.left -= len(chunk)
        return chunk


def jsonl_format(objects: list[dict[str, Any]]) -> str | None:
    decider = _Decider()
    for obj in objects:
        decider.feed(obj)
        if decider.settled is not None:
            break
    return decider.verdict()


def document_items(data: Any) -> list[Any] | None:
    """The items of a JSON document: a list, or ``messages`` / ``input`` / ``items`` of an
    object (a Chat Completions or Responses request, a dump of a session)."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        for key in ("messages", "input", "items", "output"):
            if isinstance(data.get(key), list):
                return list(data[key])
    return None


def document_format(items: list[Any]) -> str | None:
    if any(chat_shaped(v) for v in items if isinstance(v, dict)):
        return "chat"
    if looks_like_items(items):
        return "responses"
    return None


def load_document(path: Path) -> Any:
    data = read_regular(path, MAX_DOCUMENT_BYTES + 1)
    if len(data) > MAX_DOCUMENT_BYTES:
        raise ValueError(
            f"a JSON document over the {MAX_DOCUMENT_BYTES}-byte limit; "
            "write the items as JSON Lines (one item a line) to ingest it in pieces"
        )
    return json.loads(data.decode("utf-8"))
