"""The values the ingest parsers produce: canonical items with their place in the source."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sandmem._items import Item
from sandmem._truncate import truncate_chars_head_tail

#: a string longer than this (characters) keeps its head and tail around a marker
MAX_TEXT_CHARS = 32 * 1024
#: a drop label as the parsers make them (``item:ghost_snapshot``, ``developer_message``); a
#: label built from source data that is not one (an unknown type holding anything, a secret
#: included) is counted under ``<prefix>:other``
_LABEL = re.compile(r"[a-z][a-z_.-]{0,39}(?::[a-z][a-z_.-]{0,39})?")


class Line(NamedTuple):
    """One complete line of a JSONL source: its 0-based position, the byte offset just after it,
    and its JSON object (``None`` when the line is not a JSON object)."""

    pos: int
    end: int
    data: dict[str, Any] | None


@dataclass
class Event:
    """One canonical item (or a marker) at position ``pos`` of its source: a line index, a
    list index or a database row id. ``turn`` marks a user message that starts a new turn;
    ``error`` and ``interrupted`` mark how the source says the turn ended."""

    pos: int
    item: Item | None
    time: str | None = None
    end: int | None = None
    turn: bool = False
    error: str | None = None
    error_type: str | None = None
    interrupted: bool = False


@dataclass
class SourceMeta:
    """What a parser learned about the source session besides its items."""

    format: str
    session_id: str | None = None
    stream: str | None = None
    cwd: str | None = None
    started_at: str | None = None
    title: str | None = None
    dropped: Counter[str] = field(default_factory=Counter)
    #: the source position being read, and the first one this ingest counts drops for (the
    #: part read again only for context is not counted twice)
    position: int = 0
    count_from: int = 0

    def drop(self, what: str, count: int = 1) -> None:
        if not _LABEL.fullmatch(what):
            what = what.split(":", 1)[0] + ":other" if ":" in what else "other"
            what = what if _LABEL.fullmatch(what) else "other"
        if self.position >= self.count_from:
            self.dropped[what] += count


def bound(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` cut to about ``limit`` characters, keeping its head and tail."""
    return truncate_chars_head_tail(text, limit, where="at ingest")


def bound_value(value: Any, depth: int = 0) -> Any:
    """``value`` with every string in it bounded (``bound``)."""
    if isinstance(value, str):
        return bound(value)
    if depth > 50:
        return bound(json.dumps(value, default=str))
    if isinstance(value, dict):
        return {str(k): bound_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [bound_value(v, depth + 1) for v in value]
    return value


def iso_time(value: Any) -> str | None:
    """A source timestamp as ISO-8601 UTC (``...Z``): ISO strings, SQLite's
    ``YYYY-MM-DD HH:MM:SS`` (UTC) and epoch seconds or milliseconds; ``None`` otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        if isinstance(value, int | float):
            seconds = value / 1000 if value > 1e11 else value
            moment = datetime.fromtimestamp(seconds, UTC)
        elif isinstance(value, str) and value.strip():
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
        else:
            return None
    except (ValueError, OverflowError, OSError):
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def message(role: str, text: str) -> Item:
    return {"type": "message", "role": role, "content": bound(text)}


def exec_call(call_id: str, cmd: Any, workdir: Any = None) -> Item:
    """A shell command as sandmem's own ``exec_command`` call, so rendering and the extractive
    engine read its command, working directory and exit code as for a native run."""
    if isinstance(cmd, list):
        words = [str(w) for w in cmd]
        # ["bash", "-lc", "pytest -q"] is the command "pytest -q"
        if len(words) == 3 and words[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh"):
            if words[1] in ("-lc", "-c"):
                cmd = words[2]
        if isinstance(cmd, list):
            import shlex

            cmd = shlex.join(words)
    args: dict[str, Any] = {"cmd": bound(str(cmd))}
    if isinstance(workdir, str) and workdir:
        args["workdir"] = workdir
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": "exec_command",
        "arguments": json.dumps(args, ensure_ascii=False),
    }


def patch_call(call_id: str, patch: str) -> Item:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": "apply_patch",
        "arguments": json.dumps({"patch": bound(patch)}, ensure_ascii=False),
    }


def tool_call(call_id: str, name: str, arguments: Any) -> Item:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": name or "unknown_tool",
        "arguments": bound(args),
    }


def call_output(call_id: str, text: str, exit_code: int | None = None) -> Item:
    """A tool output; an exit code becomes the ``exit_code: N`` status line a native exec
    output starts with."""
    body = bound(text)
    if exit_code is not None:
        body = f"exit_code: {exit_code}\n{body}"
    return {"type": "function_call_output", "call_id": call_id, "output": body}


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a dict, else an empty one."""
    return value if isinstance(value, dict) else {}
