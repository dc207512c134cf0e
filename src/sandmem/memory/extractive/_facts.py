"""From a parsed rollout to the facts phase one reports: requests, what users said (from every
message), outcomes, steps (edits by any tool counted as changes), files, failures and their
recovery."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from sandmem._items import Item, content_text, item_kind
from sandmem.memory._render import ParsedRollout, RolloutSegment
from sandmem.memory.extractive._edit_tools import changes_state, edit_tool_changes
from sandmem.memory.extractive._patches import PatchChange, patch_changes
from sandmem.memory.extractive._salience import Statement, fact_line, statements
from sandmem.memory.extractive._shell import (
    describe_content,
    edits_files,
    file_effects,
    kind_of,
    listed_dir,
    ls_entries,
    read_exec_output,
    viewed_file,
)
from sandmem.memory.extractive._text import clip, one_line
from sandmem.memory.rollouts import exception_text, read_note
from sandmem.redaction import Redactor

_TOOL_ERROR = re.compile(r"^\s*error\b[:\s]", re.I)
_FAILED_LINE = re.compile(r"^(?:FAILED|ERROR)\s+\S")
_EXC_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Exit)\b:?")
_E_LINE = re.compile(r"^E\s{2,}\S")
_COMPILER_LINE = re.compile(r"^(?:error(?:\[\w+\])?:\s|\S+:\d+(?::\d+)?:\s*(?:fatal )?error\b)")
_FOUND_LINE = re.compile(r"^Found \d+ errors?\b")
#: (pattern, take the last match?) in order of preference
_ERROR_PATTERNS = (
    (_FAILED_LINE, False),
    (_COMPILER_LINE, False),
    (_EXC_LINE, True),
    (_FOUND_LINE, True),
    (_E_LINE, False),
)
_ERRORISH = re.compile(
    r"(?i)\b(?:error|exception|failed|failure|traceback|not found|no such file|denied|fatal|"
    r"unable to|cannot|could not|permission)\b"
)
#: summary lines that only repeat that something failed
_GENERIC = re.compile(
    r"^(?:make(?:\[\d+\])?: \*\*\* \[|npm ERR! (?:code|errno|A complete log)|Running `|"
    r"Compiling )"
)
_RESULT_LINE = re.compile(r"\b\d+ (?:passed|failed|errors?|tests? ran)\b|^OK\b|^Ran \d+ tests?")
_ALTERNATIVE_KINDS = ("run", "tests", "build", "lint")
#: the kinds of command whose output's most concrete line is kept when they succeed (they
#: changed state: a script, a build, an install, a deploy); tests keep their result line
_STATEFUL_KINDS = ("run", "build", "other")


@dataclass
class Step:
    """One tool call and its result. ``ok`` is ``None`` when the result is unknown."""

    number: int
    segment: int
    tool: str
    label: str  # the command (one line), "apply_patch", or the tool name
    kind: str  # tests, lint, build, run, inspect, other, patch, tool
    key: str  # steps with the same key are reruns of the same thing
    ok: bool | None = None
    exit_code: int | None = None
    timed_out: bool = False
    error: str = ""
    result: str = ""  # e.g. "3 passed" for a test run, the output line of a deploy script
    changes: list[PatchChange] = field(default_factory=list)
    #: the step changed files without naming them all (``git apply``, a formatter, ``patch``)
    edited: bool = False

    @property
    def changed(self) -> bool:
        """Whether the step changed files (an edit tool, a patch, a shell edit)."""
        return bool(self.changes) or self.edited


@dataclass
class Failure:
    """A failed step (reruns merged in) and what came after it: ``recovered_by`` is the later
    success of the same command (or, when ``instead``, of another command of the same kind run
    with the same program), ``fixes`` the changes and builds made in between."""

    first: Step
    attempts: int = 1
    recovered_by: Step | None = None
    instead: bool = False
    fixes: list[Step] = field(default_factory=list)


@dataclass
class FileFact:
    path: str
    actions: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    holds: str = ""


@dataclass
class Outcome:
    segment: int
    state: str
    exception: str
    answer: str


@dataclass
class Facts:
    #: every user message, in order
    requests: list[str] = field(default_factory=list)
    #: the requests that ask for something (not only corrections and preferences)
    tasks: list[str] = field(default_factory=list)
    #: what the users said worth keeping, from every message (``_salience``)
    statements: list[Statement] = field(default_factory=list)
    corrections: list[str] = field(default_factory=list)
    preferences: list[str] = field(default_factory=list)
    #: what notes given over MCP (``memory_remember``) said, as ``(kind, text)``: a fact or a
    #: procedure (a preference note's text is among ``preferences``)
    notes: list[tuple[str, str]] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    files: dict[str, FileFact] = field(default_factory=dict)
    dirs: dict[str, list[str]] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)


def _compact(item: Item) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False, default=str)


def _json_args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


class _Walker:
    """Walks the segments in order, building :class:`Facts`."""

    def __init__(self) -> None:
        self.redactor = Redactor()
        self.facts = Facts()
        self.seen: set[str] = set()
        self.calls: dict[str, tuple[Step, dict[str, Any]]] = {}

    def segment(self, number: int, segment: RolloutSegment) -> None:
        redact = self.redactor.redact_obj
        items = self._new_input(redact(segment.input)) + redact(segment.generated_items)
        answer = ""
        for item in items:
            self.seen.add(_compact(item))
            kind = item_kind(item)
            if kind == "message" and item.get("role") == "user":
                self._user(content_text(item.get("content")), first=not self.facts.requests)
            elif kind == "message" and item.get("role") == "assistant":
                answer = content_text(item.get("content")) or answer
            elif kind in ("function_call", "custom_tool_call"):
                self._call(number, item)
            elif kind in ("function_call_output", "custom_tool_call_output"):
                self._output(item)
        final = self.redactor.redact_obj(segment.final_output)
        if not answer and final is not None:
            answer = final if isinstance(final, str) else json.dumps(final, default=str)
        meta = self.redactor.redact_obj(segment.terminal_metadata)
        exc = exception_text(meta)
        self.facts.outcomes.append(
            Outcome(number, segment.terminal_state, clip(exc.strip(), 240), answer.strip())
        )

    def _new_input(self, items: list[Item]) -> list[Item]:
        """The input without the history a session replays (its last item is always new)."""
        start = 0
        while start < len(items) - 1 and _compact(items[start]) in self.seen:
            start += 1
        return items[start:]

    def _user(self, text: str, *, first: bool) -> None:
        text = text.strip()
        if not text:
            return
        note = read_note(text)
        if note is not None and note[0] != "note":
            self._note(*note)
            return
        if note is not None:
            text = note[1]
        said = statements(text, len(self.facts.requests) + 1)
        self.facts.requests.append(text)
        known = {s.text for s in self.facts.statements}
        for statement in said:  # a sentence said again is kept once, where it was first said
            if statement.text not in known:
                known.add(statement.text)
                self.facts.statements.append(statement)
        for statement in said:
            if statement.kind == "preference":
                _add_unique(self.facts.preferences, statement.text)
            elif statement.kind == "correction":
                _add_unique(self.facts.corrections, statement.text)
        if first or any(s.kind not in ("preference", "correction") for s in said) or not said:
            self.facts.tasks.append(text)

    def _note(self, kind: str, text: str) -> None:
        """A note of a declared kind is filed by that kind, never as a task, whatever its
        wording (a fact that says *never* is still a fact)."""
        self.facts.requests.append(text)
        if kind == "preference":
            _add_unique(self.facts.preferences, text)
        elif (kind, text) not in self.facts.notes:
            self.facts.notes.append((kind, text))

    def _call(self, segment: int, item: Item) -> None:
        name = str(item.get("name") or "tool")
        args = _json_args(item.get("arguments", item.get("input")))
        number = len(self.facts.steps) + 1
        if name == "exec_command" and isinstance(args.get("cmd"), str | list):
            cmd = args["cmd"] if isinstance(args["cmd"], str) else " ".join(map(str, args["cmd"]))
            kind, key = kind_of(cmd)
            step = Step(number, segment, name, cmd, kind, key)
        elif name == "apply_patch":
            patch = args.get("patch", args.get("input", item.get("input")))
            changes = patch_changes(patch) if isinstance(patch, str) else []
            target = changes[0].path if changes else ""
            step = Step(number, segment, name, "apply_patch", "patch", f"patch:{target}")
            step.changes = changes
        elif (edits := edit_tool_changes(name, args)) is not None:
            step = Step(number, segment, name, name, "patch", f"patch:{edits[0].path}")
            step.changes = edits
        else:
            step = Step(number, segment, name, name, "tool", f"tool:{name}")
        self.facts.steps.append(step)
        self.calls[str(item.get("call_id"))] = (step, args)

    def _output(self, item: Item) -> None:
        found = self.calls.pop(str(item.get("call_id")), None)
        if found is None:
            return
        step, args = found
        raw = item.get("output")
        text = raw if isinstance(raw, str) else content_text(raw)
        if _TOOL_ERROR.match(text):
            step.ok, step.error = False, clip(_TOOL_ERROR.sub("", one_line(text), count=1), 240)
            step.changes = []
            return
        if step.tool != "exec_command":
            step.ok = True
            if step.kind == "tool" and changes_state(step.tool):
                step.result = fact_line(text, 120)
            return
        self._exec_result(step, text, args)

    def _exec_result(self, step: Step, text: str, args: dict[str, Any]) -> None:
        outcome = read_exec_output(text)
        step.exit_code, step.timed_out = outcome.exit_code, outcome.timed_out
        workdir = args.get("workdir") if isinstance(args.get("workdir"), str) else None
        if outcome.timed_out or (outcome.exit_code not in (None, 0)):
            step.ok = False
            step.error = "" if outcome.timed_out else error_line(outcome.body)
            return
        step.ok = True if outcome.exit_code == 0 else None
        step.edited = edits_files(step.label)
        if step.kind == "tests":
            step.result = result_line(outcome.body)
        elif step.kind in _STATEFUL_KINDS or step.edited:
            step.result = fact_line(outcome.body, 120)
        for effect in file_effects(step.label, workdir):
            if effect.action in ("moved", "copied"):
                step.changes.append(PatchChange(effect.action, effect.path, "", effect.detail))
            else:
                step.changes.append(PatchChange(effect.action, effect.path, effect.detail))
        viewed = viewed_file(step.label, workdir)
        if viewed and outcome.body.strip():
            holds = describe_content(viewed, outcome.body)
            if holds:
                self._file(viewed).holds = holds
        listed = listed_dir(step.label, workdir)
        if listed and outcome.body.strip():
            self.facts.dirs[listed] = ls_entries(outcome.body)

    def _record(self, change: PatchChange) -> None:
        fact = self._file(change.path)
        if change.new_path:
            _add_unique(fact.details, f"{change.action} to `{change.new_path}`")
            target = self._file(change.new_path)
            _add_unique(target.details, f"{change.action} from `{change.path}`")
            target.holds = target.holds or fact.holds
            return
        _add_unique(fact.actions, change.action)
        if change.action in ("created", "written") and change.detail and not fact.holds:
            fact.holds = change.detail
        elif change.detail:
            _add_unique(fact.details, change.detail)

    def _file(self, path: str) -> FileFact:
        return self.facts.files.setdefault(path, FileFact(path))

    def finish(self) -> Facts:
        for step in self.facts.steps:
            for change in step.changes if step.ok is not False else []:
                if change.detail != "directory":
                    self._record(change)
        self.facts.failures = failures(self.facts.steps)
        return self.facts


def _add_unique(values: list[str], value: str) -> None:
    if value not in values:
        values.append(value)


def error_line(body: str) -> str:
    """The most telling line of a failed command's output."""
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    informative = [line for line in lines if not _GENERIC.match(line)]
    for pattern, pick_last in _ERROR_PATTERNS:
        matches = [line for line in informative if pattern.match(line)]
        if matches:
            return clip(matches[-1] if pick_last else matches[0], 200)
    for pool in (informative, lines):
        errorish = [line for line in pool if _ERRORISH.search(line)]
        if errorish:
            return clip(errorish[-1], 200)
    return clip(lines[-1], 200) if lines else ""


def result_line(body: str) -> str:
    lines = [line.strip(" =") for line in body.splitlines() if _RESULT_LINE.search(line)]
    return clip(lines[-1], 80) if lines else ""


def failures(steps: list[Step]) -> list[Failure]:
    """Failed steps, reruns of an open failure merged into it; a later success with the same
    key recovers it, and the changes made in between are its fix."""
    found: list[Failure] = []
    open_by_key: dict[str, Failure] = {}
    for step in steps:
        if step.ok is False:
            if step.key in open_by_key:
                open_by_key[step.key].attempts += 1
            else:
                failure = Failure(step)
                found.append(failure)
                open_by_key[step.key] = failure
        elif step.ok is True and step.key in open_by_key:
            _recover(open_by_key.pop(step.key), step, steps)
    for failure in open_by_key.values():
        first = failure.first
        if first.kind not in _ALTERNATIVE_KINDS:
            continue
        later = steps[first.number :]
        alternative = next((s for s in later if s.ok is True and _same_program(first, s)), None)
        if alternative is not None:
            _recover(failure, alternative, steps)
            failure.instead = True
    return found


def _same_program(failed: Step, later: Step) -> bool:
    """Whether ``later`` runs the program of ``failed`` another way (``python -c …`` then
    ``python script.py``; ``ruff check`` then ``ruff check --fix && pytest``)."""
    if later.tool != "exec_command":
        return False
    if failed.kind == "run":
        return later.key.split(" ", 1)[0] == failed.key.split(" ", 1)[0]
    tool = failed.key.split(":", 1)[1]
    return re.search(rf"(?<![\w-]){re.escape(tool)}(?![\w-])", later.label) is not None


def _recover(failure: Failure, step: Step, steps: list[Step]) -> None:
    failure.recovered_by = step
    failure.fixes = [
        s
        for s in steps[failure.first.number : step.number - 1]
        if (s.ok is True or (s.ok is None and s.kind == "patch"))
        and (s.changed or s.kind == "build")
    ]


def analyse(parsed: ParsedRollout) -> Facts:
    walker = _Walker()
    for number, segment in enumerate(parsed.segments, start=1):
        walker.segment(number, segment)
    return walker.finish()
