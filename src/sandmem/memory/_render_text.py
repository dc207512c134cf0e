"""Text compaction used by :mod:`sandmem.memory._render`: payload notes and bounded excerpts.

- :func:`scrub_payloads` replaces data URLs and long base64 runs by ``[base64 data, N bytes
  omitted]``;
- :func:`clean_terminal` drops ANSI colour codes and progress lines overwritten with ``\\r``;
- :func:`binary_share` tells how much of a text is control or replacement characters;
- :func:`bound_text` scrubs payloads, then keeps a long text's head and tail lines plus
  error-like lines from the omitted middle, within a byte budget.

Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sandmem._truncate import BYTES_PER_TOKEN, truncate_head_tail

__all__ = ["binary_share", "bound_text", "clean_terminal", "nbytes", "scrub_payloads"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BINARY_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\ufffd]")
_DATA_URL = re.compile(
    r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w.+-]+=[\w.+-]+)*;base64,[A-Za-z0-9+/=_-]+"
)
_BASE64_RUN = re.compile(
    r"[A-Za-z0-9+/]{40,}(?:\r?\n[A-Za-z0-9+/]{40,})*(?:\r?\n[A-Za-z0-9+/]{2,39}={1,2}|={1,2})?"
)
_BASE64_MIN = 200
_ERROR_LINE = re.compile(
    r"(?i:(?<![\w-])(?:errors?|fatal|fail(?:s|ed|ure|ures)?|panic(?:ked)?|traceback|exception|"
    r"assert\w*|denied|time(?:d out|out)|segmentation fault|cannot|could not|not found)(?![\w-]))"
    r"|\b[A-Z]\w*(?:Error|Exception)\b|^E\s"
)
_LOCATION_LINE = re.compile(r"[\w./-]+\.\w+:\d+|^\s*File \"[^\"]+\", line \d+")
#: a line can match ``_ERROR_LINE`` only if its casefolded text contains one of these (or it
#: starts with "E"): a cheap test first, the regex only on the lines that pass it
_ERROR_WORDS = (
    "error", "fatal", "fail", "panic", "traceback", "exception", "assert", "denied",
    "timed out", "timeout", "segmentation fault", "cannot", "could not", "not found",
)  # fmt: skip
#: what every ``_LOCATION_LINE`` match contains; a cheap test first (the full pattern
#: backtracks over long path-like words, and most log lines have no location at all)
_LOCATION_HINT = re.compile(r':\d|File "')
_SALVAGE_LINES = 40
_SALVAGE_LINE_BYTES = 300


def nbytes(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


def clean_terminal(text: str) -> str:
    """Drop ANSI colour codes and progress lines overwritten with a carriage return."""
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    if "\r" not in text:
        return text
    return "\n".join(
        next((p for p in reversed(line.split("\r")) if p), "") for line in text.split("\n")
    )


def binary_share(text: str) -> float:
    return (len(text) - len(_BINARY_CHARS.sub("", text))) / len(text)


def scrub_payloads(text: str) -> str:
    """Replace data URLs and long base64 runs by a size note."""
    if len(text) < 40:
        return text
    return _BASE64_RUN.sub(_base64_note, _DATA_URL.sub(_data_url_note, text))


def _data_url_note(match: re.Match[str]) -> str:
    mime = f" ({match.group('mime')})" if match.group("mime") else ""
    return f"[base64 data{mime}, {len(match.group(0))} bytes omitted]"


def _base64_note(match: re.Match[str]) -> str:
    run = match.group(0)
    mixed = any(c.isdigit() for c in run) and any(c.isupper() for c in run) and not run.islower()
    if len(run) < _BASE64_MIN or not mixed or run.count("/") * 16 > len(run):
        return run  # a path, a word list or a hex digest, not an encoded payload
    return f"[base64 data, {len(run)} bytes omitted]"


def bound_text(text: str, budget: int, what: str) -> str:
    """``text`` if it fits ``budget`` bytes; else its head and tail lines (35% of the budget
    each) around a marker that lists error-like lines of the omitted middle (the last 30%).
    Text with too few lines falls back to a byte-level head+tail cut."""
    text = scrub_payloads(text)
    size = nbytes(text)
    if size <= budget:
        return text
    lines = text.split("\n")
    room = budget * 7 // 20
    head = _fit(lines, room)
    tail = _fit(lines[head:][::-1], room)
    if head == 0 or tail == 0 or head + tail >= len(lines):
        return truncate_head_tail(text, max(budget // BYTES_PER_TOKEN, 1), what=what)
    middle = lines[head : len(lines) - tail]
    salvaged = _salvage(middle, head, budget - 2 * room)
    marker = (
        f"[... {len(middle)} lines ({nbytes(chr(10).join(middle))} bytes) of {what} omitted "
        f"(total {len(lines)} lines, {size} bytes)"
    )
    marker += "; error-like lines among them:" if salvaged else " ...]"
    kept = [*salvaged, "...]"] if salvaged else []
    return "\n".join([*lines[:head], marker, *kept, *lines[len(lines) - tail :]])


def _fit(lines: list[str], room: int) -> int:
    """How many leading ``lines`` fit ``room`` bytes."""
    used = 0
    for count, line in enumerate(lines):
        used += nbytes(line) + 1
        if used > room:
            return count
    return len(lines)


def _salvage(middle: list[str], offset: int, room: int) -> list[str]:
    """Distinct error-like lines of ``middle``, then file:line locations, shown in their
    original order, within ``room`` bytes."""
    candidates: dict[str, tuple[int, int]] = {}  # clipped line -> (tier, index)
    errors, locations = _marked_lines(middle)
    for index in sorted(errors | locations):
        tier = 0 if index in errors else 1
        candidates.setdefault(_clip(middle[index].strip()), (tier, index))
    chosen: list[tuple[int, str]] = []
    used = 0
    for text, (_, index) in sorted(candidates.items(), key=lambda kv: kv[1]):
        if len(chosen) >= _SALVAGE_LINES:
            break
        if used + nbytes(text) + 12 <= room:
            chosen.append((index, text))
            used += nbytes(text) + 12
    out = [f"  L{offset + index + 1}: {text}" for index, text in sorted(chosen)]
    if len(candidates) > len(chosen):
        out.append(f"  (+{len(candidates) - len(chosen)} more error-like lines)")
    return out


def _marked_lines(lines: list[str]) -> tuple[set[int], set[int]]:
    """The indexes of ``lines`` that ``_is_error`` holds for, and of the others that
    ``_is_location`` holds for. Their cheap tests run once over the lines joined (a long tool
    output has ~100,000 lines; a test per line was half of rendering a rollout), the
    patterns only on the lines those tests find."""
    text = "\n".join(lines)
    folded = text.casefold()  # per character: the folded lines are ``folded``'s lines
    if folded.count("\n") != len(lines) - 1:  # never so; the test per line is the rule
        errors = {i for i, line in enumerate(lines) if _is_error(line)}
        return errors, {i for i, line in enumerate(lines) if i not in errors and _is_location(line)}
    maybe = _line_numbers(folded, _found(folded, _ERROR_WORDS))
    maybe |= _line_numbers(text, _line_starts(text, "E"))
    errors = {i for i in maybe if _ERROR_LINE.search(lines[i]) is not None}
    places = _line_numbers(text, (m.start() for m in _LOCATION_HINT.finditer(text)))
    locations = {
        i for i in places if i not in errors and _LOCATION_LINE.search(lines[i]) is not None
    }
    return errors, locations


def _found(text: str, words: Iterable[str]) -> list[int]:
    """Where each of ``words`` is first found in each line of ``text``, ascending."""
    found: list[int] = []
    for word in words:
        at = text.find(word)
        while at != -1:
            found.append(at)
            end = text.find("\n", at + 1)
            at = -1 if end == -1 else text.find(word, end + 1)
    return sorted(found)


def _line_starts(text: str, prefix: str) -> list[int]:
    """Where the lines of ``text`` that start with ``prefix`` start, ascending."""
    found = [0] if text.startswith(prefix) else []
    at = text.find("\n" + prefix)
    while at != -1:
        found.append(at + 1)
        at = text.find("\n" + prefix, at + 1)
    return found


def _line_numbers(text: str, positions: Iterable[int]) -> set[int]:
    """The numbers (from 0) of the lines of ``text`` that hold ``positions`` (ascending)."""
    found: set[int] = set()
    line = last = 0
    for position in positions:
        line += text.count("\n", last, position)
        last = position
        found.add(line)
    return found


def _is_error(line: str) -> bool:
    if not line.startswith("E"):
        folded = line.casefold()
        if not any(word in folded for word in _ERROR_WORDS):
            return False
    return _ERROR_LINE.search(line) is not None


def _is_location(line: str) -> bool:
    return _LOCATION_HINT.search(line) is not None and _LOCATION_LINE.search(line) is not None


def _clip(line: str) -> str:
    return line if len(line) <= _SALVAGE_LINE_BYTES else line[:_SALVAGE_LINE_BYTES] + " ..."
