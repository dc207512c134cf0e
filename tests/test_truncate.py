"""Head+tail truncation (``sandmem._truncate``): the one home of every head-and-tail cut."""

from __future__ import annotations

import pytest

from sandmem._truncate import snap_head, snap_tail, truncate_chars_head_tail


@pytest.mark.parametrize("text", ["", "short", "x" * 100])
def test_a_text_within_the_limit_is_kept_whole(text: str) -> None:
    assert truncate_chars_head_tail(text, 100, where="here") == text


@pytest.mark.parametrize(("size", "limit"), [(101, 100), (1000, 100), (1000, 7), (50, 2)])
def test_a_long_text_keeps_its_head_and_tail_and_counts_what_went(size: int, limit: int) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(size))
    cut = truncate_chars_head_tail(text, limit, where="at ingest")
    half = limit // 2
    head, marker, tail = cut.split("\n")
    assert head == text[:half] and tail == text[-half:]
    assert marker == f"[... {size - 2 * half} characters omitted at ingest ...]"


def test_a_streamed_cut_moves_to_a_line_break() -> None:
    assert snap_head(b"first line\nsecret-tok") == b"first line\n"
    assert snap_tail(b"en-rest\nlast line") == b"last line"


def test_a_streamed_cut_without_a_line_break_stops_at_a_token_boundary() -> None:
    assert snap_head(b"word sk-abc123") == b"word "
    assert snap_tail(b"abc123 rest") == b"rest"
    # nothing to move to: the cut stays where it is
    assert snap_head(b"sk-abc123") == b"sk-abc123"
