"""A small, safe Markdown-to-HTML renderer for the memory viewer.

Everything is HTML-escaped first; only the structure sandmem's memory files use is turned
into markup: headings, bullet and numbered lists, fenced code, inline code, bold, paragraphs.
Links are never followed (the page makes no requests): ``rollout_summaries/...md`` references
become in-page links through the ``link`` callback, everything else stays text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from sandmem.memory.layout import SUMMARIES_DIR

#: a reference to a rollout summary, as MEMORY.md and raw memories write them
SUMMARY_REF = re.compile(re.escape(SUMMARIES_DIR) + r"/[A-Za-z0-9][A-Za-z0-9._-]*\.md")

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^(\s*)\d+[.)]\s+(.*)$")
_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")

Link = Callable[[str], str | None]


def inline(text: str, link: Link | None = None) -> str:
    """One line of Markdown as escaped HTML with code, bold and summary links."""
    out: list[str] = []
    pos = 0
    for match in _CODE.finditer(text):
        out.append(_plain(text[pos : match.start()], link))
        out.append(f"<code>{_links(html.escape(match.group(1)), link)}</code>")
        pos = match.end()
    out.append(_plain(text[pos:], link))
    return "".join(out)


def _plain(text: str, link: Link | None) -> str:
    escaped = _BOLD.sub(r"<strong>\1</strong>", html.escape(text))
    return _links(escaped, link)


def _links(escaped: str, link: Link | None) -> str:
    if link is None:
        return escaped

    def replace(match: re.Match[str]) -> str:
        target = link(match.group(0))
        if target is None:
            return f'<span class="ref missing" title="not on disk">{match.group(0)}</span>'
        return f'<a class="ref" href="#{html.escape(target)}">{match.group(0)}</a>'

    return SUMMARY_REF.sub(replace, escaped)


class _Builder:
    def __init__(self, link: Link | None) -> None:
        self.link = link
        self.out: list[str] = []
        self.paragraph: list[str] = []
        self.list_tag: str | None = None

    def flush(self) -> None:
        if self.paragraph:
            lines = "<br>".join(inline(p, self.link) for p in self.paragraph)
            self.out.append(f"<p>{lines}</p>")
            self.paragraph = []
        if self.list_tag:
            self.out.append(f"</{self.list_tag}>")
            self.list_tag = None

    def item(self, tag: str, text: str) -> None:
        if self.paragraph:
            self.flush()
        if self.list_tag != tag:
            self.flush()
            self.out.append(f"<{tag}>")
            self.list_tag = tag
        self.out.append(f"<li>{inline(text, self.link)}</li>")

    def line(self, line: str, shift: int) -> None:
        heading = _HEADING.match(line)
        bullet = _BULLET.match(line)
        numbered = _NUMBERED.match(line)
        if not line.strip():
            self.flush()
        elif heading:
            self.flush()
            level = min(len(heading.group(1)) + shift, 6)
            self.out.append(f"<h{level}>{inline(heading.group(2), self.link)}</h{level}>")
        elif bullet:
            self.item("ul", bullet.group(2))
        elif numbered:
            self.item("ol", numbered.group(2))
        else:
            if self.list_tag:
                self.flush()
            self.paragraph.append(line.strip())


def markdown(text: str, link: Link | None = None, *, shift: int = 0) -> str:
    """``text`` as HTML; headings move down ``shift`` levels (to nest under the page's)."""
    builder = _Builder(link)
    fence: list[str] | None = None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if fence is None:
                builder.flush()
                fence = []
            else:
                code = _links(html.escape("\n".join(fence)), link)
                builder.out.append(f"<pre><code>{code}</code></pre>")
                fence = None
            continue
        if fence is not None:
            fence.append(line)
        else:
            builder.line(line, shift)
    if fence is not None:
        builder.out.append(f"<pre><code>{html.escape(chr(10).join(fence))}</code></pre>")
    builder.flush()
    return "\n".join(builder.out)


def task_groups(text: str) -> tuple[str, list[tuple[str, str]]]:
    """``MEMORY.md`` split at its ``## `` headings: the text before the first, and each task
    group as (title, body)."""
    preamble: list[str] = []
    groups: list[tuple[str, list[str]]] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            groups.append((line[3:].strip(), []))
        elif groups:
            groups[-1][1].append(line)
        else:
            preamble.append(line)
    return "\n".join(preamble), [(title, "\n".join(body)) for title, body in groups]
