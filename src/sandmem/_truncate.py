"""Head+tail truncation with a visible omission marker (4 bytes a token estimate)."""

from __future__ import annotations

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
