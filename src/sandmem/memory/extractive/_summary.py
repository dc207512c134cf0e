"""``memory_summary.md`` of the extractive engine: user preferences, then general tips
(commands that work, and ones that did not), then an index of the task groups.

A general tip is advice for every later run, so it needs more than one lucky command: a command
that edits files in place (``sed -i``, ``perl -pi``, a redirect into a file, a heredoc, ``tee``,
``patch``) is a tip only when two or more conversations used it; other commands (a test run, a
build) are tips from one. Rollout ids are cited short (``run-1a2b3c4d`` for
``run-1a2b3c4d...``: still a prefix to search ``MEMORY.md`` with), at most three per line, so
the summary's budget goes to what was learned."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sandmem.memory.extractive._groups import code_spans, normalize
from sandmem.memory.extractive._text import Section, clip, code, fit_sections

if TYPE_CHECKING:
    from sandmem.memory.extractive.phase_two import Block, Learning

MAX_PREFERENCES = 20
MAX_TIPS = 12
MAX_FAILED_TIPS = 5
_LABEL = re.compile(r"^\w+:\s*")
_WORKS_KIND = re.compile(r"\((tests|build|lint|run)\b")
_KIND_ORDER = ("tests", "build", "lint", "run")
_STATES = re.compile(
    r"\b(completed|interrupted|cancelled|failed|max_turns_exceeded|guardrail_tripped|unknown)\b"
)
_FIXED_BY = re.compile(r"fixed by (.+?)(?:; (?:then|later) .*)?$")
_HEAD = (
    "# Memory summary\n\n"
    "What {n} earlier conversation(s) in this workspace taught, distilled offline by sandmem's "
    "extractive engine. Details: search `MEMORY.md` with the task's keywords; it points to the "
    "rollout summaries.\n"
)


_LONG_HEX = re.compile(r"^(.*?[^0-9a-f])?([0-9a-f]{16,})$")
_EDITS_IN_PLACE = re.compile(
    r"\bsed\s+(-\w*\s+)*-\w*i|\bperl\s+-\w*i|(^|[^>&\d])>>?\s*(?!/dev/null)[^\s&>]|<<|\btee\b|\bpatch\b"
)
MAX_CITED = 3


def short_id(rollout_id: str) -> str:
    """``rollout_id`` with a long hex tail cut to 8 digits (a prefix of the real id)."""
    match = _LONG_HEX.match(rollout_id)
    if match is None:
        return rollout_id
    return (match.group(1) or "") + match.group(2)[:8]


_ID_IN_TEXT = re.compile(r"\b[A-Za-z0-9][A-Za-z0-9._-]*?[0-9a-f]{16,}\b")


def shorten_ids(text: str) -> str:
    """``text`` with every id that ends in a long hex tail cited short (``short_id``)."""
    return _ID_IN_TEXT.sub(lambda m: short_id(m.group(0)), text)


def edits_in_place(command: str) -> bool:
    """Whether a shell command edits files (a one-off change, not a way of working)."""
    return bool(_EDITS_IN_PLACE.search(command))


def _cite(rollouts: list[str]) -> str:
    label = "rollout" if len(rollouts) == 1 else "rollouts"
    shown = ", ".join(short_id(r) for r in rollouts[:MAX_CITED])
    more = f" and {len(rollouts) - MAX_CITED} more" if len(rollouts) > MAX_CITED else ""
    return f"({label} {shown}{more})"


def _all(blocks: list[Block], kind: str) -> list[Learning]:
    return [ln for b in blocks for ln in b.learnings if ln.kind == kind]


def preference_lines(blocks: list[Block]) -> list[str]:
    """Preferences, newest first, each once."""
    seen: set[str] = set()
    lines = []
    for learning in sorted(_all(blocks, "preference"), key=lambda ln: ln.age):
        text = learning.text.removeprefix("Preference:").strip()
        key = normalize(text)
        if key not in seen:
            seen.add(key)
            lines.append(f"- {text} {_cite(learning.rollouts)}")
    return lines[:MAX_PREFERENCES]


def tip_lines(blocks: list[Block]) -> list[str]:
    """Commands that worked (tests, builds, linters, scripts: most supported first; an edit in
    place only when two or more conversations used it), then a few that failed and were not
    recovered."""
    works: dict[str, tuple[str, list[str], int]] = {}
    for learning in _all(blocks, "works"):
        spans = code_spans(learning.text)
        kind = _WORKS_KIND.search(learning.text)
        if not spans:
            continue
        command = spans[0]
        _, rollouts, age = works.get(command, ("", [], learning.age))
        merged = rollouts + [r for r in learning.rollouts if r not in rollouts]
        works[command] = (kind.group(1) if kind else "run", merged, min(age, learning.age))
    works = {
        cmd: entry for cmd, entry in works.items() if len(entry[1]) >= 2 or not edits_in_place(cmd)
    }
    ranked = sorted(
        works.items(),
        key=lambda kv: (_KIND_ORDER.index(kv[1][0]), -len(kv[1][1]), kv[1][2], kv[0]),
    )
    lines = [f"- {code(cmd)} works ({kind}) {_cite(rs)}" for cmd, (kind, rs, _) in ranked]
    failed = sorted(_all(blocks, "failed"), key=lambda ln: ln.age)
    lines = lines[:MAX_TIPS]
    for learning in failed[:MAX_FAILED_TIPS]:
        text = _LABEL.sub("", learning.text).removesuffix("; not recovered")
        lines.append(f"- Did not work: {clip(text, 240)} {_cite(learning.rollouts)}")
    return lines


def index_lines(blocks: list[Block]) -> list[str]:
    """One line per task group, newest first: heading, files, the fix, a bad outcome."""
    lines = []
    for block in blocks:
        rollouts = [m.rollout_id for m in block.group.members]
        line = f"- **{shorten_ids(block.heading)}** {_cite(rollouts)}"
        paths = block.group.paths[:4]
        if paths:
            line += " — files: " + ", ".join(code(p) for p in paths)
        fixes = [_fix(ln) for ln in block.learnings if ln.kind == "fix"][:2]
        if fixes:
            line += "; " + "; ".join(fixes)
        outcome = _newest_outcome(block)
        if outcome:
            line += f"; last outcome: {outcome}"
        lines.append(line)
    return lines


def _fix(learning: Learning) -> str:
    text = _LABEL.sub("", learning.text)
    match = _FIXED_BY.search(text)
    return clip("fixed by " + match.group(1) if match else text, 300)


def _newest_outcome(block: Block) -> str:
    """The newest rollout's outcome when it was not ``completed``."""
    newest = block.group.members[0]
    outcome = next((b.text for b in newest.bullets if b.kind == "outcome"), "")
    state = _LABEL.sub("", outcome)
    states = set(_STATES.findall(state))
    return "" if not state or states == {"completed"} else clip(state, 160)


def render_summary(blocks: list[Block], n: int, max_bytes: int) -> str:
    sections = [
        Section("User preferences", preference_lines(blocks)),
        Section("General tips", tip_lines(blocks)),
        Section("What memory holds", index_lines(blocks)),
    ]
    if not any(s.lines for s in sections):
        sections[2].lines = ["- Nothing yet."]
    return fit_sections(_HEAD.format(n=n), sections, max_bytes, [2, 1, 0])
