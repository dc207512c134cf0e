"""A small docstring reader for tool descriptions: the summary text and per-argument
descriptions, from Google (``Args:``), NumPy (``Parameters`` + dashes) or Sphinx (``:param x:``)
style. Unknown layouts give the whole text as the description and no argument descriptions.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

_GOOGLE_ARGS = re.compile(r"^(Args|Arguments|Parameters|Params)\s*:\s*$")
_GOOGLE_OTHER = re.compile(
    r"^(Returns|Return|Yields|Raises|Examples?|Notes?|Attributes|See Also|Warnings?)\s*:\s*$"
)
_GOOGLE_ITEM = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_HEADER = re.compile(r"^-{3,}\s*$")
_NUMPY_ITEM = re.compile(r"^(\*{0,2}\w+)\s*(:.*)?$")
_SPHINX_FIELD = re.compile(r"^:(\w+)(?:\s+([^\s:]+))?(?:\s+(\w+))?\s*:\s*(.*)$")


@dataclass
class DocInfo:
    description: str = ""
    params: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> DocInfo:
    """Description and argument descriptions of a docstring, in whichever style it uses."""
    if not doc or not doc.strip():
        return DocInfo()
    lines = inspect.cleandoc(doc).splitlines()
    for parser in (_sphinx, _numpy, _google):
        info = parser(lines)
        if info is not None:
            return info
    return DocInfo(description=_join(lines))


def _join(lines: list[str]) -> str:
    """Paragraphs kept apart by a blank line; lines within a paragraph joined by spaces."""
    paragraphs = [" ".join(p.split()) for p in "\n".join(lines).split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google(lines: list[str]) -> DocInfo | None:
    start = next((i for i, line in enumerate(lines) if _GOOGLE_ARGS.match(line.strip())), None)
    if start is None:
        return None
    params: dict[str, str] = {}
    base: int | None = None
    current: str | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        if _indent(line) == 0 and (_GOOGLE_OTHER.match(line.strip()) or _GOOGLE_ARGS.match(line)):
            break
        if _indent(line) == 0:
            break
        base = _indent(line) if base is None else base
        match = _GOOGLE_ITEM.match(line.strip())
        if _indent(line) <= base and match:
            current = match.group(1).lstrip("*")
            params[current] = match.group(3).strip()
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()
    return DocInfo(description=_join(lines[:start]), params=params)


def _numpy(lines: list[str]) -> DocInfo | None:
    start = None
    for i in range(len(lines) - 1):
        if lines[i].strip() in ("Parameters", "Arguments", "Args") and _NUMPY_HEADER.match(
            lines[i + 1].strip()
        ):
            start = i
            break
    if start is None:
        return None
    params: dict[str, str] = {}
    current: str | None = None
    body = lines[start + 2 :]
    for index, line in enumerate(body):
        if not line.strip():
            continue
        following = body[index + 1].strip() if index + 1 < len(body) else ""
        if _indent(line) == 0 and _NUMPY_HEADER.match(following):
            break  # the next section
        if _indent(line) == 0 and _NUMPY_HEADER.match(line.strip()):
            continue
        match = _NUMPY_ITEM.match(line.strip())
        if _indent(line) == 0 and match:
            current = match.group(1).lstrip("*")
            params[current] = ""
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()
    return DocInfo(description=_join(lines[:start]), params=params)


def _sphinx(lines: list[str]) -> DocInfo | None:
    start = next(
        (i for i, line in enumerate(lines) if _SPHINX_FIELD.match(line.strip())),
        None,
    )
    if start is None:
        return None
    params: dict[str, str] = {}
    current: str | None = None
    for line in lines[start:]:
        match = _SPHINX_FIELD.match(line.strip())
        if match:
            kind, first, second, text = match.groups()
            name = second or first
            if kind in ("param", "parameter", "arg", "argument", "key", "keyword") and name:
                current = name
                params[name] = text.strip()
            else:
                current = None
        elif current is not None and line.strip():
            params[current] = f"{params[current]} {line.strip()}".strip()
    return DocInfo(description=_join(lines[:start]), params=params)
