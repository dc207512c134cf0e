"""Text that can always be written: lone surrogates (a broken emoji escape in a model's
output, ``"\\ud83d"`` without its pair) would make UTF-8 encoding raise."""

from __future__ import annotations


def safe_text(text: str) -> str:
    """``text`` with surrogate pairs joined and lone surrogates replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
