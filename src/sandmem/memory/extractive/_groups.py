"""Phase two's reading of raw memories (bullets, kinds, citations) and their grouping into task
groups by shared files and keywords."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass, field

from sandmem.memory._types import SelectedMemory
from sandmem.memory.extractive._shell import kind_of
from sandmem.memory.extractive._text import clip, find_paths, one_line
from sandmem.memory.layout import parse_header
from sandmem.memory.selection import newest_first

#: bullet kinds, most important first (the order of learnings inside a group)
KINDS = (
    "task",
    "preference",
    "procedure",
    "correction",
    "decision",
    "constraint",
    "fix",
    "failed",
    "works",
    "fact",
    "changed",
    "request",
    "outcome",
    "file",
    "note",
    "result",
    "directory",
)
_LABEL = re.compile(
    r"^(task|outcome|result|preference|procedure|correction|decision|constraint|fact|request|"
    r"changed|fix|"
    r"failed|works|file|directory)\s*:\s*",
    re.I,
)
_CITATION = re.compile(r"\s*\((?:rollouts?|rollout[_ ]id:?|source:?)\s+[^()]*\)\s*[.;]?\s*$", re.I)
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_PREFERENCE_HINT = re.compile(r"\b(?:prefers?|preference|always|never)\b", re.I)
_WORD = re.compile(r"[a-z][a-z0-9_]{3,}")
_STOPWORDS = frozenset(
    """also after again before could does doesn done each from have into just like make more
    most much need only other please should still such sure than that their them then there
    these they this those using very want were what when where which while will with without
    would your yours about above below across inspect workspace file files find check change
    changes fixed first last over under some made the and for you task outcome completed
    result redacted gets prefer prefers always never instead don't""".split()
)
_CODE_SPAN = re.compile(r"``\s?(.+?)\s?``|`([^`]+)`")
MAX_KEYWORDS = 12
#: a word shared by more memories than this is too common to group by
MAX_WORD_POSTINGS = 40
#: the most rollouts one task group gathers
MAX_GROUP_ROLLOUTS = 8


@dataclass(frozen=True)
class Bullet:
    kind: str
    text: str  # without list marker and citation

    @property
    def key(self) -> str:
        return normalize(self.text)


def normalize(text: str) -> str:
    """How two bullets are compared: citation, list marker, case and spacing ignored."""
    text = _CITATION.sub("", _BULLET.sub("", text))
    return " ".join(text.lower().split()).rstrip(".")


@dataclass
class Member:
    """One selected raw memory, parsed. ``age`` 0 is the newest."""

    memory: SelectedMemory
    age: int
    title: str
    bullets: list[Bullet]
    paths: list[str]
    words: set[str]

    @property
    def rollout_id(self) -> str:
        return self.memory.ref.rollout_id


def parse_bullets(text: str) -> tuple[str, list[Bullet]]:
    """``(title, bullets)`` of a raw memory: the first heading, and each list item or loose
    line (indented continuation lines joined) classified by its label or wording."""
    fields, body = parse_header(text)
    if "rollout_id" not in fields:
        body = text
    title = ""
    items: list[str] = []
    for line in body.splitlines():
        if not line.strip() or line.strip().startswith("```"):
            continue
        if line.lstrip().startswith("#"):
            title = title or line.strip("# \t")
        elif items and line.startswith((" ", "\t")) and not _BULLET.match(line):
            items[-1] += " " + line.strip()
        else:
            items.append(_BULLET.sub("", line).strip())
    return title, [_classify(item) for item in items if item]


def _classify(item: str) -> Bullet:
    text = _CITATION.sub("", item).strip()
    label = _LABEL.match(text)
    if label:
        return Bullet(label.group(1).lower(), text)
    if _PREFERENCE_HINT.search(text) and re.search(r"\buser\b|^(?:always|never)\b", text, re.I):
        return Bullet("preference", text)
    return Bullet("note", text)


def member(memory: SelectedMemory, age: int) -> Member:
    title, bullets = parse_bullets(memory.raw_memory)
    if not title:
        task = next((b.text for b in bullets if b.kind == "task"), "")
        title = _LABEL.sub("", task).strip('"') or _summary_title(memory.rollout_summary)
    title = clip(one_line(title), 100) or memory.ref.rollout_id
    subject = [b.text for b in bullets if b.kind not in ("works", "directory")]
    paths = find_paths("\n".join(subject))
    words: set[str] = set()
    for text in [title] + [b.text for b in bullets if b.kind == "task"]:
        words.update(w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS)
    return Member(memory, age, title, bullets, paths, words)


def _summary_title(summary: str) -> str:
    return next((ln.strip("# \t") for ln in summary.splitlines() if ln.startswith("#")), "")


def members_of(selected: list[SelectedMemory]) -> list[Member]:
    """The selected raw memories as members, newest first (ties by rollout id)."""
    by_id = {m.ref.rollout_id: m for m in selected}
    ordered = newest_first([m.ref for m in selected])
    return [member(by_id[ref.rollout_id], age) for age, ref in enumerate(ordered)]


# --------------------------------------------------------------------- grouping


@dataclass
class Group:
    members: list[Member]  # newest first
    heading: str = ""
    keywords: list[str] = field(default_factory=list)

    @property
    def newest(self) -> int:
        return self.members[0].age

    @property
    def oldest(self) -> Member:
        return self.members[-1]

    @property
    def paths(self) -> list[str]:
        """The files its rollouts mention, most mentioned first."""
        counts = Counter(p for m in self.members for p in m.paths)
        return [p for p, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def group_members(members: list[Member]) -> list[Group]:
    """Members that share a file path, or at least two keywords (half of the smaller set), are
    in one group of at most :data:`MAX_GROUP_ROLLOUTS`. Links are tried strongest first: rarer
    shared paths, then more shared words; ties by age. Paths and words found in more than half
    of 4+ memories (words: or in more than 40) link nothing."""
    links = _UnionFind(len(members))
    path_postings = _postings([set(m.paths) for m in members], len(members))
    for ids in sorted(path_postings.values(), key=lambda ids: (len(ids), ids)):
        for i, j in itertools.pairwise(ids):
            links.union(i, j)
    shared: Counter[tuple[int, int]] = Counter()
    for ids in _postings([m.words for m in members], MAX_WORD_POSTINGS).values():
        for x, i in enumerate(ids):
            for j in ids[x + 1 :]:
                shared[(i, j)] += 1
    for (i, j), count in sorted(shared.items(), key=lambda kv: (-kv[1], kv[0])):
        smaller = min(len(members[i].words), len(members[j].words))
        if count >= 2 and count * 2 >= smaller:
            links.union(i, j)
    components: dict[int, list[Member]] = {}
    for index, m in enumerate(members):
        components.setdefault(links.find(index), []).append(m)
    groups = [Group(sorted(ms, key=lambda m: m.age)) for ms in components.values()]
    groups.sort(key=lambda g: g.newest)
    _name(groups)
    return groups


class _UnionFind:
    """Disjoint sets whose size is capped at :data:`MAX_GROUP_ROLLOUTS` (a union that would
    pass the cap is skipped, so one popular file cannot chain everything into one group)."""

    def __init__(self, size: int) -> None:
        self.parent = list(range(size))
        self.size = [1] * size

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        a, b = self.find(i), self.find(j)
        if a != b and self.size[a] + self.size[b] <= MAX_GROUP_ROLLOUTS:
            root, child = min(a, b), max(a, b)
            self.parent[child] = root
            self.size[root] += self.size[child]


def _postings(sets: list[set[str]], cap: int) -> dict[str, list[int]]:
    """Value → indexes of the sets holding it, for values in 2 to ``cap`` sets and, with 4+
    sets, in at most half of them (a value everyone mentions links nothing)."""
    postings: dict[str, list[int]] = {}
    for index, values in enumerate(sets):
        for value in sorted(values):
            postings.setdefault(value, []).append(index)
    limit = min(len(sets) / 2 if len(sets) >= 4 else len(sets), cap)
    return {k: v for k, v in sorted(postings.items()) if 1 < len(v) <= limit}


def _name(groups: list[Group]) -> None:
    """Heading = the distinct task titles of the group, oldest first (so every task in it is
    named in its heading; at most three, then ``+N more``); unique."""
    used: set[str] = set()
    for group in groups:
        titles: list[str] = []
        for m in reversed(group.members):
            title = m.title.replace("\n", " ").strip("# ").rstrip(".:;,")
            if title and title.lower() not in {t.lower() for t in titles}:
                titles.append(title)
        heading = " / ".join(titles[:3]) or group.oldest.rollout_id
        if len(titles) > 3:
            heading += f" (+{len(titles) - 3} more)"
        if heading.lower() in used or heading.lower().startswith("notes kept from manual edits"):
            heading = f"{heading} ({group.oldest.rollout_id})"
        used.add(heading.lower())
        group.heading = heading
        group.keywords = keywords(group)


def keywords(group: Group) -> list[str]:
    """Up to 12: file paths, task words and tools, most frequent first."""
    counts: Counter[str] = Counter()
    for m in group.members:
        counts.update(set(m.paths))
        counts.update(m.words)
        for b in m.bullets:
            spans = code_spans(b.text) if b.kind == "works" else []
            kind, key = kind_of(spans[0]) if spans else ("", "")
            if kind in ("tests", "build", "lint"):
                counts[key.split(":", 1)[1]] += 1
    return [k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:MAX_KEYWORDS]


def code_spans(text: str) -> list[str]:
    return [a or b for a, b in _CODE_SPAN.findall(text)]
