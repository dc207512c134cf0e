"""Text helpers of the extractive engine: clipping, code spans, sentences, slugs, paths, and
fitting Markdown sections into a byte budget without cutting a line."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

ELLIPSIS = "…"

_WS = re.compile(r"\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9`])")
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_SLUG_WORD = re.compile(r"[a-z0-9_]+")
_SLUG_STOPWORDS = frozenset(
    "a an and are as at be by can could for from i in into is it me my of on or our please "
    "py src that the this to we with you your".split()
)
#: a workspace file path: a known file extension, relative (absolute paths and URLs are not
#: workspace files)
_PATH = re.compile(
    r"(?<![\w:/.-])(?:\.{1,2}/)?(?:[\w.-]+/)*[\w-][\w.-]*\."
    r"(?:py|pyi|md|rst|txt|csv|tsv|json|jsonl|toml|yaml|yml|ini|cfg|sql|sh|js|jsx|ts|tsx|go|rs|"
    r"java|kt|rb|php|c|h|cc|cpp|hpp|cs|swift|html|css|scss|xml|ipynb|lock|env|parquet|xlsx|log)"
    r"(?!\w)"
)


def nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


def one_line(text: str) -> str:
    """``text`` on one line: the first non-empty line, whitespace collapsed, ``…`` when more
    lines followed."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    first = _WS.sub(" ", lines[0]).strip()
    return first + (f" {ELLIPSIS}" if len(lines) > 1 else "")


def clip(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters (``…`` marks a cut)."""
    flat = _WS.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    return flat[: max(limit - 1, 0)].rstrip() + ELLIPSIS


def code(text: str) -> str:
    """A Markdown code span that survives backticks inside ``text``."""
    if "`" not in text:
        return f"`{text}`"
    return f"`` {text} ``"


def quote(text: str, limit: int) -> str:
    return '"' + clip(text, limit) + '"'


_QUOTES = str.maketrans("\u2018\u2019\u201c\u201d", "''\"\"")


def normalize_quotes(text: str) -> str:
    return text.translate(_QUOTES)


def sentences(text: str) -> list[str]:
    """Sentences of a user message: split on line breaks and sentence ends; list markers
    stripped; empty ones dropped."""
    out: list[str] = []
    for line in normalize_quotes(text).splitlines():
        line = _LIST_MARK.sub("", line).strip()
        out.extend(part.strip() for part in _SENTENCE_END.split(line) if part.strip())
    return out


def slugify(text: str, max_len: int = 60) -> str:
    """A slug valid for ``^[a-z0-9][a-z0-9_-]{0,79}$``: the request's words, lower-case, without
    filler words, joined by hyphens, cut at a word boundary; ``rollout`` when nothing is left."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    words = [w.strip("_") for w in _SLUG_WORD.findall(ascii_text)]
    words = list(dict.fromkeys(w for w in words if w and w not in _SLUG_STOPWORDS))
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > max_len:
            break
        slug = candidate
    if not slug and words:
        slug = words[0][:max_len].rstrip("_-")
    return slug or "rollout"


def find_paths(text: str) -> list[str]:
    """Workspace paths mentioned in ``text``, in order, without duplicates (URLs, pytest node
    ids' ``::`` suffixes and trailing punctuation removed)."""
    found: dict[str, None] = {}
    for match in _PATH.finditer(text):
        path = match.group(0)
        found.setdefault(path[2:] if path.startswith("./") else path, None)
    return [p for p in found if p]


# --------------------------------------------------------------------- budgets


@dataclass
class Section:
    """A Markdown section: ``## title`` then lines. ``keep`` lines always stay; the others may
    be dropped from the end (replaced by one omission line) to fit a budget."""

    title: str
    lines: list[str] = field(default_factory=list)
    keep: int = 1

    def render(self) -> str:
        return f"## {self.title}\n" + "".join(f"{line}\n" for line in self.lines)


def render_sections(head: str, sections: list[Section]) -> str:
    parts = [head.rstrip("\n") + "\n"] if head else []
    parts.extend(s.render() for s in sections if s.lines)
    return "\n".join(parts)


def fit_sections(
    head: str, sections: list[Section], max_bytes: int, shrink_order: list[int]
) -> str:
    """Render ``sections`` within ``max_bytes``: drop lines from the end of the sections in
    ``shrink_order`` (each in turn, down to its ``keep`` lines, adding one ``- … N more
    omitted`` line), then, if still too big, whole lines from the end of the text."""
    size = nbytes(render_sections(head, sections))
    for index in shrink_order:
        section = sections[index]
        dropped = 0
        while size > max_bytes and len(section.lines) - (1 if dropped else 0) > section.keep:
            if dropped:
                size -= nbytes(section.lines.pop()) + 1  # the old omission line
            size -= nbytes(section.lines.pop()) + 1
            dropped += 1
            marker = f"- {ELLIPSIS} {dropped} more omitted"
            section.lines.append(marker)
            size += nbytes(marker) + 1
        if size <= max_bytes:
            break
    return cut_lines(render_sections(head, sections), max_bytes)


def fit_scored(
    head: str, sections: list[Section], scores: list[list[float]], max_bytes: int
) -> str:
    """Render ``sections`` within ``max_bytes`` by dropping their lowest-scoring lines first,
    wherever they are (ties: the longer line first, then the later one); each section's first
    ``keep`` lines stay, and a section that lost lines ends with one ``- … N more omitted``
    line. ``scores[i][j]`` is the score of line ``j`` of section ``i``."""
    size = nbytes(render_sections(head, sections))
    if size <= max_bytes:
        return render_sections(head, sections)
    candidates = sorted(
        (
            (score, -nbytes(section.lines[j]), -j, i, j)
            for i, section in enumerate(sections)
            for j, score in enumerate(scores[i])
            if j >= section.keep
        ),
    )
    dropped: dict[int, set[int]] = {}
    for _, minus_size, _, i, j in candidates:
        if size <= max_bytes:
            break
        gone = dropped.setdefault(i, set())
        if not gone:
            size += nbytes(f"- {ELLIPSIS} 99 more omitted") + 1
        gone.add(j)
        size -= -minus_size + 1
    for i, gone in dropped.items():
        section = sections[i]
        section.lines = [ln for j, ln in enumerate(section.lines) if j not in gone]
        section.lines.append(f"- {ELLIPSIS} {len(gone)} more omitted")
    return cut_lines(render_sections(head, sections), max_bytes)


def cut_lines(text: str, max_bytes: int) -> str:
    """``text`` if it fits; otherwise its longest prefix of whole lines that fits."""
    if nbytes(text) <= max_bytes:
        return text
    kept: list[str] = []
    used = 0
    for line in text.splitlines(keepends=True):
        size = nbytes(line)
        if used + size > max_bytes:
            break
        kept.append(line)
        used += size
    return "".join(kept)
