"""Extractive phase one: a rollout file's text in → slug, rollout summary and raw memory out.

Pure and deterministic: no clock, no randomness, no I/O. Bounds grow with the conversation's
user messages: the rollout summary is at most :func:`summary_budget` bytes, the raw memory at
most :func:`raw_memory_budget` (UTF-8); the slug at most :data:`SLUG_MAX_CHARS` characters.
What a budget cuts is chosen by salience (``_salience``), never by position.
"""

from __future__ import annotations

import re

from sandmem.memory._render import parse_rollout
from sandmem.memory._types import PhaseOneArtifacts
from sandmem.memory.extractive._facts import Facts, Failure, FileFact, Step, analyse
from sandmem.memory.extractive._patches import PatchChange
from sandmem.memory.extractive._salience import LABELS, Statement, fact_count, salient_quote
from sandmem.memory.extractive._text import (
    Section,
    clip,
    code,
    cut_lines,
    fit_scored,
    nbytes,
    one_line,
    sentences,
    slugify,
)
from sandmem.redaction import redact

#: a redaction marker, left out of slugs
_MARKER = re.compile(r"\[REDACTED:[^\]]*\]")
#: the rollout summary's budget for a conversation of one user message; each further user
#: message adds :data:`SUMMARY_BYTES_PER_MESSAGE`, up to :data:`SUMMARY_CAP_BYTES`
SUMMARY_MAX_BYTES = 6 * 1024
SUMMARY_BYTES_PER_MESSAGE = 1024
SUMMARY_CAP_BYTES = 64 * 1024
#: the raw memory's budget, grown the same way
RAW_MEMORY_MAX_BYTES = 3 * 1024
RAW_MEMORY_BYTES_PER_MESSAGE = 384
RAW_MEMORY_CAP_BYTES = 16 * 1024
SLUG_MAX_CHARS = 60
MAX_STEP_LINES = 30
#: more step lines for longer conversations, up to this many
MAX_STEP_LINES_CAP = 120
_USEFUL_KINDS = ("tests", "build", "lint", "run")
_GERUNDS = {
    "changed": "editing",
    "created": "creating",
    "deleted": "deleting",
    "moved": "moving",
    "written": "writing",
    "copied": "copying",
}
_KIND_PRIORITY = {"patch": 1, "tests": 1, "build": 1, "lint": 1, "run": 2, "tool": 2, "other": 2}
#: how much a line of each summary section is worth keeping (plus its concrete facts)
_STEP_SCORES = {0: 6.0, 1: 5.0, 2: 4.0, 3: 2.0}


def summary_budget(user_messages: int) -> int:
    """The rollout summary's byte budget: 6 KiB, plus 1 KiB per user message after the
    first, at most 64 KiB."""
    extra = SUMMARY_BYTES_PER_MESSAGE * max(user_messages - 1, 0)
    return min(SUMMARY_MAX_BYTES + extra, SUMMARY_CAP_BYTES)


def raw_memory_budget(user_messages: int) -> int:
    """The raw memory's byte budget: 3 KiB, plus 384 bytes per user message after the first,
    at most 16 KiB."""
    extra = RAW_MEMORY_BYTES_PER_MESSAGE * max(user_messages - 1, 0)
    return min(RAW_MEMORY_MAX_BYTES + extra, RAW_MEMORY_CAP_BYTES)


def extract(rollout_id: str, rollout_text: str) -> PhaseOneArtifacts | None:
    """Phase one without a model. ``None`` when the rollout has no user request (nothing worth
    remembering)."""
    facts = analyse(parse_rollout(rollout_text))
    if not facts.requests:
        return None
    messages = len(facts.requests)
    return PhaseOneArtifacts(
        rollout_slug=slugify(_MARKER.sub(" ", redact(facts.requests[0])), SLUG_MAX_CHARS),
        rollout_summary=_bounded(render_summary(facts), summary_budget(messages)),
        raw_memory=_bounded(render_raw_memory(facts, rollout_id), raw_memory_budget(messages)),
    )


def _bounded(text: str, max_bytes: int) -> str:
    return cut_lines(redact(text), max_bytes).rstrip("\n") + "\n"


def quote(text: str, limit: int) -> str:
    """``text`` quoted on one line within ``limit`` characters, its most telling sentences
    kept when it is longer."""
    return '"' + salient_quote(text, limit) + '"'


def title(facts: Facts) -> str:
    """The first sentence of the first request."""
    first = sentences(facts.requests[0])
    return clip(first[0] if first else one_line(facts.requests[0]), 100)


# --------------------------------------------------------------------- shared phrases


def what(step: Step, limit: int = 160) -> str:
    """How a step is named: its command, or the tool (with the patched file)."""
    if step.tool == "exec_command":
        return code(clip(one_line(step.label), limit))
    if step.kind == "patch" and step.key != "patch:":
        return f"apply_patch on {code(step.key.removeprefix('patch:'))}"
    return step.label


def step_phrase(step: Step) -> str:
    """`cmd` → exit 1: `error`  /  apply_patch: changed `a.py`  /  tool → ok."""
    target = what(step) if step.ok is False or step.tool == "exec_command" else step.label
    if step.ok is False:
        status = "timed out" if step.timed_out else _exit(step, "failed")
        return f"{target} → {status}" + (f": {code(step.error)}" if step.error else "")
    changes = "; ".join(change_phrase(c) for c in step.changes)
    if step.tool != "exec_command" and step.ok:
        said = f" ({step.result})" if step.result else ""
        return f"{target}: {changes}" if changes else f"{target} → ok{said}"
    status = _exit(step, "ok" if step.ok else "no result")
    if step.result:
        status += f" ({step.result})"
    return f"{target} → {status}" + (f"; {changes}" if changes else "")


def _exit(step: Step, fallback: str) -> str:
    return f"exit {step.exit_code}" if step.exit_code is not None else fallback


def change_phrase(change: PatchChange, verb: str = "") -> str:
    text = f"{verb or change.action} {code(change.path)}"
    if change.new_path:
        text += f" to {code(change.new_path)}"
    return f"{text} ({change.detail})" if change.detail else text


def fix_phrase(failure: Failure) -> str:
    """What came after a failure: its fix and the rerun, or that it was not recovered."""
    first = failure.first
    error = f": {code(first.error)}" if first.error else ""
    status = "timed out" if first.timed_out else _exit(first, "error")
    times = f" ({failure.attempts} attempts)" if failure.attempts > 1 else ""
    text = f"{what(first, 120)} failed ({status}{error}){times}"
    after = failure.recovered_by
    if after is None:
        return text + "; not recovered"
    fixes = [
        change_phrase(c, _GERUNDS.get(c.action, c.action)) for s in failure.fixes for c in s.changes
    ] + [f"running {what(s, 80)}" for s in failure.fixes if not s.changes]
    if fixes:
        text += "; fixed by " + "; ".join(fixes[:3]) + ("; …" if len(fixes) > 3 else "")
    if after.label != first.label:
        rerun = what(after, 120) if after.tool == "exec_command" else ""
        then = "later" if failure.instead else "then"
        worked = "worked instead" if failure.instead else "worked"
        return text + (f"; {then} {rerun} {worked}" if rerun else f"; {then} it worked")
    verb = "passed" if first.kind == "tests" else "worked"
    if not failure.fixes and after.changed:
        return text + f"; then {what(after, 120)}, which changes files, {verb}"
    if not failure.fixes:
        return text + f"; then it {verb} on a rerun with no change in between"
    return text + f"; then it {verb}"


def outcome_phrase(facts: Facts) -> str:
    states = [o.state for o in facts.outcomes]
    if len(states) == 1:
        text = states[0]
    else:
        text = f"{len(states)} segments: " + ", ".join(states)
    last = facts.outcomes[-1]
    if last.exception:
        text += f" ({last.exception})"
    return text


def file_phrase(fact: FileFact) -> str:
    parts = [fact.holds] if fact.holds else []
    actions = [a for a in fact.actions if not (a == "changed" and fact.details)]
    if actions:
        parts.append(", ".join(actions))
    parts.extend(fact.details[:3])
    return f"{code(fact.path)}: " + "; ".join(parts) if parts else code(fact.path)


# --------------------------------------------------------------------- rollout summary


def render_summary(facts: Facts) -> str:
    """The rollout summary, within :func:`summary_budget` of its user messages: what is cut
    first is what scores lowest (routine steps, plain sentences), never by position."""
    multi = len(facts.outcomes) > 1
    first = quote(facts.requests[0], 300)
    said = [s for s in facts.statements if not _quoted(s, first)]
    steps, step_scores = _step_lines(facts.steps, multi, len(facts.requests))
    outcomes = _outcome_lines(facts, multi)
    sections = [
        Section("Request", [f"- {first}"]),
        Section(
            "What the user said",
            [f"- {LABELS[s.kind]} (message {s.turn}): {quote(s.text, 300)}" for s in said],
            keep=0,
        ),
        Section("Outcome", [line for line, _ in outcomes], keep=0),
        Section("Steps that mattered", steps, keep=0),
        Section("Files", [f"- {file_phrase(f)}" for f in facts.files.values()], keep=0),
        Section(
            "Errors and what came after", [f"- {fix_phrase(f)}" for f in facts.failures], keep=0
        ),
    ]
    scores = [
        [10.0],
        [float(s.score) for s in said],
        [score for _, score in outcomes],
        step_scores,
        [3.0 + fact_count(line) / 8 for line in sections[4].lines],
        [7.0] * len(facts.failures),
    ]
    head = f"# {title(facts)}\n"
    return fit_scored(head, sections, scores, summary_budget(len(facts.requests)))


def _quoted(statement: Statement, request: str) -> bool:
    """Whether a plain sentence of the first message is already in its quoted request."""
    return (
        statement.turn == 1
        and statement.kind in ("request", "fact")
        and (statement.text in request)
    )


def _outcome_lines(facts: Facts, multi: bool) -> list[tuple[str, float]]:
    lines = []
    for outcome in facts.outcomes:
        prefix = f"Segment {outcome.segment}: " if multi else "Terminal state: "
        line = f"- {prefix}{outcome.state}"
        if outcome.exception:
            line += f" ({outcome.exception})"
        if outcome.answer:
            line += f". Final answer: {quote(outcome.answer, 400)}"
        last = outcome is facts.outcomes[-1]
        lines.append((line, 9.0 if last else 4.0 + min(fact_count(outcome.answer), 4)))
    return lines


def _step_lines(steps: list[Step], multi: bool, messages: int) -> tuple[list[str], list[float]]:
    limit = min(MAX_STEP_LINES + 3 * max(messages - 1, 0), MAX_STEP_LINES_CAP)
    ranked = sorted(steps, key=lambda s: (_priority(s), s.number))
    shown = sorted(ranked[:limit], key=lambda s: s.number)
    lines = [f"- {f'[s{s.segment}] ' if multi else ''}{step_phrase(s)}" for s in shown]
    scores = [_STEP_SCORES[_priority(s)] + min(fact_count(s.result), 2) / 4 for s in shown]
    if len(steps) > len(shown):
        lines.append(f"- ({len(steps) - len(shown)} routine steps not shown)")
        scores.append(1.0)
    return lines, scores


def _priority(step: Step) -> int:
    if step.ok is False or step.changed:
        return 0
    return _KIND_PRIORITY.get(step.kind, 3)


# --------------------------------------------------------------------- raw memory


def render_raw_memory(facts: Facts, rollout_id: str) -> str:
    """Bullets, most durable first, each ending with ``(rollout <id>)``; bullets that do not
    fit :func:`raw_memory_budget` are left out, least important first."""
    cite = f" (rollout {rollout_id})"
    ranked: list[str] = []
    ranked += [f"- Task: {quote(r, 240)}" for r in facts.tasks[:3]]
    ranked.append(f"- Outcome: {outcome_phrase(facts)}")
    ranked += [f"- Preference: {quote(p, 240)}" for p in facts.preferences]
    ranked += [f"- {kind.capitalize()}: {quote(text, 240)}" for kind, text in facts.notes]
    ranked += [f"- Correction: {quote(c, 240)}" for c in facts.corrections]
    shown = {quote(r, 240)[1:-1] for r in facts.tasks[:3]}
    said = [
        s
        for s in sorted(facts.statements, key=lambda s: -s.score)
        if s.kind in ("decision", "constraint", "fact", "request")
        and not any(s.text in t for t in shown)
    ]
    ranked += [f"- {LABELS[s.kind]}: {quote(s.text, 240)}" for s in said if s.score >= 7]
    ranked += [f"- Fix: {fix_phrase(f)}" for f in facts.failures if f.recovered_by]
    ranked += [f"- Works: {w}" for w in _working_commands(facts.steps)]
    answer = next((o.answer for o in reversed(facts.outcomes) if o.answer), "")
    if answer:
        ranked.append(f"- Result: {quote(answer, 300)}")
    ranked += [
        f"- {LABELS[s.kind]}: {quote(s.text, 240)}"
        for s in said
        if s.score < 7 and fact_count(s.text)
    ]
    ranked += [f"- Failed: {fix_phrase(f)}" for f in facts.failures if not f.recovered_by]
    ranked += [f"- Changed: {_changed_phrase(s)}" for s in facts.steps if _stateful_result(s)]
    ranked += [
        f"- Result: {quote(o.answer, 240)}"
        for o in facts.outcomes[:-1]
        if o.answer and fact_count(o.answer) >= 2
    ]
    ranked += [f"- File: {file_phrase(f)}" for f in facts.files.values()]
    ranked += [
        f"- Directory: {code(d.rstrip('/') + '/')} contains "
        + ", ".join(code(e) for e in entries[:12])
        + (f" and {len(entries) - 12} more" if len(entries) > 12 else "")
        for d, entries in facts.dirs.items()
        if entries
    ]
    head = f"## {title(facts)}\n"
    budget = raw_memory_budget(len(facts.requests)) - nbytes(head)
    kept: set[int] = set()
    seen: set[str] = set()
    for index, bullet in enumerate(ranked):
        size = nbytes(bullet + cite + "\n")
        if size <= budget and bullet not in seen:
            kept.add(index)
            seen.add(bullet)
            budget -= size
    order = _display_order(ranked)
    return head + "".join(ranked[i] + cite + "\n" for i in order if i in kept)


def _stateful_result(step: Step) -> bool:
    """A tool call that changed something and said what (a deploy, a migration), other than
    the scripts, builds and tests that ``Works`` bullets already name with their result."""
    return step.ok is True and bool(step.result) and step.kind in ("other", "tool")


def _changed_phrase(step: Step) -> str:
    return f"{what(step, 120)} → {code(step.result)}"


_DISPLAY = (
    "Task",
    "Outcome",
    "Result",
    "Preference",
    "Correction",
    "Decision",
    "Constraint",
    "Request",
    "Fact",
    "Changed",
    "Fix",
    "Failed",
    "Works",
    "File",
    "Directory",
)


def _display_order(bullets: list[str]) -> list[int]:
    def key(index: int) -> tuple[int, int]:
        label = bullets[index][2:].split(":", 1)[0]
        return (_DISPLAY.index(label) if label in _DISPLAY else len(_DISPLAY), index)

    return sorted(range(len(bullets)), key=key)


def _working_commands(steps: list[Step]) -> list[str]:
    seen: dict[str, str] = {}
    for step in steps:
        if step.ok is True and step.tool == "exec_command" and step.kind in _USEFUL_KINDS:
            cmd = clip(one_line(step.label), 160)
            note = step.kind + (f"; {step.result}" if step.result else "")
            seen.setdefault(cmd, f"{code(cmd)} ({note})")
    ordered = sorted(seen.values(), key=lambda w: 0 if "(tests" in w else 1)
    return ordered[:8]
