"""Telling the transcript formats apart from their content."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from sandmem.memory.ingestion._claude import ENTRY_TYPES
from sandmem.memory.ingestion._codex import WRAPPER_TYPES
from sandmem.memory.ingestion._items import looks_like_chat, looks_like_items
from sandmem.memory.ingestion._lines import decode_line
from sandmem.memory.ingestion._sqlite import SQLITE_MAGIC

Format = Literal["codex", "claude-code", "openai-agents", "responses", "chat"]
FORMATS: tuple[str, ...] = ("codex", "claude-code", "openai-agents", "responses", "chat")
_HEAD_BYTES = 256 * 1024
#: a JSON (not JSONL) document larger than this is refused: write it as JSONL
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024


def sniff(head: bytes) -> tuple[str | None, str]:
    """The format of a file whose first bytes are ``head`` (``"document"`` for a JSON
    document to be parsed whole), or ``None`` and why not."""
    if head.startswith(SQLITE_MAGIC):
        return "openai-agents", "a SQLite database"
    text = head.lstrip()
    if not text:
        return None, "empty file"
    objects = [o for o in (decode_line(raw) for raw in head.split(b"\n")[:50]) if o is not None]
    if objects:  # a garbage line among JSON lines is the parser's to skip and count
        found = jsonl_format(objects)
        if found is not None:
            return found, "JSON Lines"
    if b"\x00" in head:
        return None, "binary data (not JSON Lines, JSON or SQLite)"
    if text[:1] in (b"[", b"{"):
        return "document", "a JSON document"
    return None, "no known transcript shape in its first lines"


def jsonl_format(objects: list[dict[str, Any]]) -> str | None:
    if any(o.get("type") in WRAPPER_TYPES and "payload" in o for o in objects):
        return "codex"
    if any(
        (("sessionId" in o or "parentUuid" in o) and o.get("type") in ENTRY_TYPES)
        or (o.get("type") == "summary" and "leafUuid" in o)
        for o in objects
    ):
        return "claude-code"
    first = objects[0]
    if "id" in first and "timestamp" in first and "type" not in first and len(objects) > 1:
        return "codex"  # an early Codex file: bare session meta, then bare items
    if looks_like_chat(objects):
        return "chat"
    if looks_like_items(objects):
        return "responses"
    return None


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
    if looks_like_chat(items):
        return "chat"
    if looks_like_items(items):
        return "responses"
    return None


def read_head(path: Path) -> bytes:
    with path.open("rb") as stream:
        return stream.read(_HEAD_BYTES)


def load_document(path: Path) -> Any:
    size = path.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        raise ValueError(
            f"a JSON document of {size} bytes is over the {MAX_DOCUMENT_BYTES}-byte limit; "
            "write the items as JSON Lines (one item a line) to ingest it in pieces"
        )
    return json.loads(path.read_bytes().decode("utf-8"))
