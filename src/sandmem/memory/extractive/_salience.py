"""What is worth keeping from what people said, wherever in the conversation they said it.

Every sentence of every user message is a candidate. A sentence is classified by its wording —
a **correction** (a later message opening with *no, actually, wait, wrong, revert, ...*), a
**preference** (*always, never, I prefer, don't, from now on, ...*), a **decision** (*let's, we'll,
go with, switch to, decided, ...*), a **constraint** (*must, only, at most, without, deadline,
...*), a **request** (a question or an ask) — and scored by that class plus the concrete facts
it holds: numbers, dates, versions, paths, commands, identifiers, names. The same scoring picks
the sentences of an assistant's final answer and the line of a tool's output worth quoting. Pure
functions over text; no position enters a score.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandmem.memory.extractive._text import ELLIPSIS, clip, sentences

PREFERENCE = re.compile(
    r"\b(?:always|never|i(?:'d| would)? prefer|prefer(?:s|red|ably)?|don't|dont|do not|"
    r"instead|please use|from now on|make sure to)\b",
    re.I,
)
CORRECTION = re.compile(
    r"^(?:no\b|nope\b|actually\b|wait\b|wrong\b|not quite\b|that'?s (?:not|wrong)\b|"
    r"that is (?:not|wrong)\b|you (?:should|shouldn't|should not|forgot|missed)\b|"
    r"(?:please )?(?:revert|undo|stop)\b)",
    re.I,
)
_DECISION = re.compile(
    r"\b(?:let'?s|let us|we(?:'ll| will| are going to| decided| agreed)|go(?:ing)? with|"
    r"decided|decision|(?:we|i) chose|switch(?:ed|ing)? to|stick(?:ing)? with|settled? on|"
    r"the plan is|we(?:'re| are) using|rename[sd]? (?:it )?to)\b",
    re.I,
)
_CONSTRAINT = re.compile(
    r"\b(?:must(?:n't| not)?|cannot|can't|can not|shouldn't|should not|needs? to|has to|"
    r"have to|only|at (?:most|least)|no (?:more|later|earlier) than|without|deadline|due|"
    r"required|requirement|not allowed|forbidden|budget|limit(?:ed)?|max(?:imum)?|"
    r"min(?:imum)?|compatible|supported)\b",
    re.I,
)
#: concrete facts: each pattern found in a sentence adds to its score
_FACTS = (
    re.compile(r"\d"),  # numbers, dates, times, ports, versions, ids
    re.compile(r"\bv?\d+\.\d+(?:\.\d+)?\b"),  # a version
    re.compile(
        r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.? \d|"
        r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|tonight|"
        r"yesterday|today)\b|\b\d{4}-\d{2}-\d{2}\b",
        re.I,
    ),
    re.compile(r"[\w.~-]*/[\w.-]+|\b[\w-]+\.(?:py|js|ts|go|rs|md|json|toml|ya?ml|sh|sql|csv)\b"),
    re.compile(r"`[^`]+`|(?:^|\s)--?[a-z][\w-]+"),  # code spans, command flags
    re.compile(r"\b[a-z]+_[a-z0-9_]+\b|\b[a-z]+[A-Z]\w*\b|\b[\w.+-]+@[\w-]+\.[\w.]+\b"),
    re.compile(r"\b[\w-]+\.(?:com|org|net|io|dev|internal|local|cloud|app)\b|https?://"),
    re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]+|\b[A-Z]{2,}[A-Z0-9]*\b"),  # names, acronyms
)
#: a sentence opening with one of these asks for something (an imperative, a polite ask)
_ASK = re.compile(
    r"^(?:please|can you|could you|would you|add|remove|delete|create|fix|run|make|update|"
    r"change|rename|move|write|use|check|show|find|implement|refactor|deploy|install|set|bump|"
    r"revert|test|try|open|build|keep|put|replace|convert|explain|list|look|investigate|debug|"
    r"help|drop|split|merge|migrate|upgrade|downgrade|pin|document|clean)\b",
    re.I,
)
#: a sentence that says where something is (credentials, a config, a log) states a fact, even
#: when it says *never* or *instead* ("the token never lives in the repo, it is in ~/.env")
_LOCATION = re.compile(
    r"\b(?:lives?|is|are|sits?|resides?|stored|kept|located|found|saved|goes|go)\s+"
    r"(?:only\s+)?(?:in|at|under|inside)\b",
    re.I,
)
#: ... unless it is addressed to the agent: an instruction or a stated preference
_ADDRESSED = re.compile(
    r"\bprefer|^(?:always|never|don't|dont|do not|please|make sure|from now on)\b|\byou\b", re.I
)
_FILLER = re.compile(
    r"^(?:ok(?:ay)?|thanks?(?: you)?|great|nice|cool|perfect|sounds good|go ahead|continue|"
    r"yes|yep|sure|done|lgtm|thx)\b[\s.!]*$",
    re.I,
)

#: how much of a tool's output is searched for its result line (outputs end with it)
_TAIL_LINES = 40
_TAIL_CHARS = 8_000
#: the classes of what a user said, most worth keeping first
KINDS = ("correction", "preference", "decision", "constraint", "request", "fact")
_KIND_SCORE = {
    "correction": 9,
    "preference": 9,
    "decision": 8,
    "constraint": 7,
    "request": 3,
    "fact": 2,
}
LABELS = {
    "correction": "Correction",
    "preference": "Preference",
    "decision": "Decision",
    "constraint": "Constraint",
    "request": "Request",
    "fact": "Fact",
}


@dataclass(frozen=True)
class Statement:
    """A sentence a user said: its class, the user message it is from (1-based ``turn``), the
    words as said, and its score (class plus concrete facts)."""

    kind: str
    turn: int
    text: str
    score: int


def fact_count(text: str) -> int:
    """How many kinds of concrete fact ``text`` holds (0 to 8)."""
    return sum(1 for pattern in _FACTS if pattern.search(text))


def classify(sentence: str, *, first: bool) -> str | None:
    """The class of a user's sentence, or ``None`` when it says nothing worth keeping (filler,
    or a plain sentence with no concrete fact)."""
    if _FILLER.match(sentence):
        return None
    if sentence.endswith("?"):
        return "request"
    if _LOCATION.search(sentence) and not _ADDRESSED.search(sentence):
        return "fact"
    if PREFERENCE.search(sentence):
        return "preference"
    if not first and CORRECTION.match(sentence):
        return "correction"
    if _DECISION.search(sentence):
        return "decision"
    if _CONSTRAINT.search(sentence):
        return "constraint"
    if _ASK.match(sentence):
        return "request"
    if fact_count(sentence):
        return "fact"
    return "request" if first else None


def statements(text: str, turn: int) -> list[Statement]:
    """The sentences of user message number ``turn`` worth keeping, in order."""
    out: list[Statement] = []
    for sentence in sentences(text):
        kind = classify(sentence, first=turn == 1)
        if kind is not None:
            out.append(Statement(kind, turn, sentence, score(sentence, kind)))
    return out


def score(sentence: str, kind: str) -> int:
    return _KIND_SCORE[kind] + min(fact_count(sentence), 4)


def salient_quote(text: str, limit: int) -> str:
    """``text`` on one line within ``limit`` characters: whole when it fits, else its most
    telling sentences (most concrete facts first; ties in order), shown in their order and
    joined by ``…``."""
    flat = clip(text, len(text) + 1)
    if len(flat) <= limit:
        return flat
    parts = [clip(s, limit) for s in sentences(text)]
    if len(parts) <= 1:
        return clip(flat, limit)
    ranked = sorted(range(len(parts)), key=lambda i: (-fact_count(parts[i]), i))
    chosen: list[int] = []
    used = 0
    for index in ranked:
        size = len(parts[index]) + (3 if chosen else 0)
        if used + size <= limit:
            chosen.append(index)
            used += size
    if not chosen:
        return clip(flat, limit)
    return f" {ELLIPSIS} ".join(parts[i] for i in sorted(chosen))


def fact_line(body: str, limit: int = 200) -> str:
    """The line among the last lines of a tool's output that states the most concrete facts
    (the last of equals: outputs end with their result), or ``""`` when none holds any."""
    best, best_count = "", 0
    for line in body[-_TAIL_CHARS:].splitlines()[-_TAIL_LINES:]:
        line = line.strip()
        if not line or len(line) > 4 * limit:
            continue
        count = fact_count(line)
        if count >= best_count and count > 0:
            best, best_count = line, count
    return clip(best, limit) if best else ""
