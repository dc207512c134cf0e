"""JSON parsing with a depth limit, for files sandmem did not just write itself."""

from __future__ import annotations

import json
from typing import Any

#: JSON deeper than this is refused wherever sandmem parses a workspace file
MAX_JSON_DEPTH = 200


def json_depth(value: Any, stop_above: int | None = None) -> int:
    """The nesting depth of a parsed JSON value, without recursion (only containers are
    visited; the walk stops once the depth exceeds ``stop_above``)."""
    if not isinstance(value, dict | list):
        return 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if stop_above is not None and deepest > stop_above:
                break
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return deepest


def loads_bounded(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that raises ``ValueError`` (never ``RecursionError``) for input nested
    deeper than ``max_depth``. The depth is only measured when the text has more brackets
    than the limit, so ordinary lines cost one parse."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {max_depth} levels") from None
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if raw.count(b"[") + raw.count(b"{") > max_depth and json_depth(value, max_depth) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return value
