"""Head+tail truncation: the one home of every cut that keeps a text's head and tail around a
visible omission marker.

- ``truncate_head_tail``: a text within a token budget (4 bytes a token estimate);
- ``truncate_chars_head_tail``: a text within a number of characters (ingested transcripts);
- ``snap_head`` / ``snap_tail``: where a streamed head and tail are cut (a command's captured
  output, ``sandboxes/_process.py``): at a line break or a character no token contains, so a
  secret is never split in two and redaction sees it whole or not at all.
"""

from __future__ import annotations

import re

BYTES_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Token estimate: UTF-8 bytes / 4, rounded up."""
    return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


def _cut_bytes(data: bytes, limit: int, *, from_end: bool) -> str:
    piece = data[-limit:] if from_end else data[:limit]
    # drop partial UTF-8 sequences at the cut
    return piece.decode("utf-8", "ignore")


def truncate_head_tail(text: str, max_tokens: int, *, what: str = "content") -> str:
    """Return ``text`` unchanged when it fits ``max_tokens``; otherwise keep its head and its
    tail (about half the budget each) around a marker that states the original and rendered
    sizes."""
    if max_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    data = text.encode("utf-8")
    budget = max_tokens * BYTES_PER_TOKEN
    if len(data) <= budget:
        return text
    marker_room = 200
    keep = max(budget - marker_room, 2)
    head = _cut_bytes(data, keep // 2, from_end=False)
    tail = _cut_bytes(data, keep - keep // 2, from_end=True)
    omitted = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    rendered = len(head.encode("utf-8")) + len(tail.encode("utf-8"))
    marker = (
        f"\n\n[... {what} truncated: {omitted} bytes omitted; original {len(data)} bytes "
        f"(~{-(-len(data) // BYTES_PER_TOKEN)} tokens), rendered {rendered} bytes "
        f"(~{-(-rendered // BYTES_PER_TOKEN)} tokens) ...]\n\n"
    )
    return head + marker + tail


def truncate_chars_head_tail(text: str, limit: int, *, where: str) -> str:
    """``text`` cut to about ``limit`` characters, keeping its first and last ``limit // 2``
    around a line ``[... N characters omitted {where} ...]``."""
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted} characters omitted {where} ...]\n{text[-half:]}"


#: how far a streamed cut may move to reach a line break or a token boundary
SNAP_BYTES = 4096
_TOKEN_BYTES = re.compile(rb"[\w.~+/=%:-]")


def snap_head(head: bytes) -> bytes:
    """``head`` cut back to just after its last line break (or token boundary) near the end."""
    window = head[-SNAP_BYTES:]
    cut = window.rfind(b"\n")
    if cut < 0:
        cut = next(
            (i for i in range(len(window) - 1, -1, -1) if not _TOKEN_BYTES.match(window, i)), -1
        )
    return head if cut < 0 else head[: len(head) - len(window) + cut + 1]


def snap_tail(tail: bytes) -> bytes:
    """``tail`` cut forward to just after its first line break (or token boundary)."""
    window = tail[:SNAP_BYTES]
    cut = window.find(b"\n")
    if cut < 0:
        cut = next((i for i in range(len(window)) if not _TOKEN_BYTES.match(window, i)), -1)
    return tail if cut < 0 else tail[cut + 1 :]
