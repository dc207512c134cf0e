"""The generated corpus of figure 14 (retrieval): coding-agent conversations with planted facts.

Everything is made here from fixed seeds (no third-party data). A conversation is a run of
turns about one project — a user request, a shell command and its output, an assistant answer
— written in one of the four formats ``sandmem memory ingest`` reads (Codex, Claude Code,
Responses items, Chat Completions messages). Into some turns a *fact* is planted, at a
position that rotates over the conversations: an early user message, a late user message, a
tool output, or a final answer.

A fact is a setting of one thing, named by four parts (``cadence``, ``area``, ``component``,
``attribute``: "the nightly billing export job times out after 45 seconds"); its *value* is
unique in the corpus and is what a retrieved text must hold (the evidence). Its *question*
paraphrases the attribute and names the thing through synonyms ("how long can the overnight
invoicing dump task run before it is stopped?"): in turn, none, one or two of the three naming
parts keep their own word (each such word names many facts of the corpus, so it is not rare);
the value is never in the question. No two facts of the corpus name the same thing, and no
value is part of another (a retried-count "10x" inside "210x", a timeout "39 seconds" inside
"439 seconds"): until 2026-12-06 values were only distinct, and a hit showing the other fact
counted as evidence, crediting 5 of the 480 questions of the figure's corpus (10 of 480 with
seed 7) for a wrong fact; a value is now drawn again until it overlaps no other.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: cadence: (word in the fact, synonym in the question)
CADENCES = [
    ("nightly", "overnight"),
    ("weekly", "once-a-week"),
    ("hourly", "every-hour"),
    ("daily", "once-a-day"),
    ("monthly", "end-of-month"),
    ("on-demand", "manually triggered"),
]
#: area of the product
AREAS = [
    ("billing", "invoicing"),
    ("authentication", "login"),
    ("shipping", "delivery"),
    ("search", "lookup"),
    ("analytics", "reporting"),
    ("notification", "alerting"),
    ("inventory", "stock"),
    ("payroll", "salary"),
    ("checkout", "purchase"),
    ("onboarding", "signup"),
    ("storage", "file-hosting"),
    ("pricing", "rate-card"),
]
#: component of that area
COMPONENTS = [
    ("export job", "dump task"),
    ("cache", "memo store"),
    ("worker", "background consumer"),
    ("migration", "schema change"),
    ("gateway", "front proxy"),
    ("test suite", "spec run"),
    ("database", "datastore"),
    ("cron script", "scheduled routine"),
    ("dashboard", "status board"),
    ("webhook", "callback endpoint"),
]
#: attribute: (fact template, question template, value maker)
ATTRIBUTES = [
    (
        "The {c} {a} {k} times out after {v} now.",
        "How long can the {C} {A} {K} run before it is stopped?",
        lambda r: f"{r.randrange(7, 990)} seconds",
    ),
    (
        "The {c} {a} {k} listens on port {v}.",
        "Which socket number does the {C} {A} {K} accept connections on?",
        lambda r: f"{r.randrange(1025, 65000)}",
    ),
    (
        "We pinned the {c} {a} {k} to release {v}.",
        "What version did we lock the {C} {A} {K} at?",
        lambda r: f"{r.randrange(1, 9)}.{r.randrange(0, 40)}.{r.randrange(0, 99)}",
    ),
    (
        "The {c} {a} {k} retries {v} times before giving up.",
        "How many attempts does the {C} {A} {K} make after a failure?",
        lambda r: f"{r.randrange(2, 600)}x",
    ),
    (
        "The {c} {a} {k} writes its output to {v}.",
        "Where on disk do the results of the {C} {A} {K} end up?",
        lambda r: f"/var/data/{_word(r)}/{_word(r)}-{r.randrange(10, 99)}",
    ),
    (
        "Priya owns the {c} {a} {k}; page {v} when it breaks.",
        "Who should be contacted when the {C} {A} {K} fails?",
        lambda r: f"@{_word(r)}-{_word(r)}",
    ),
]
#: where a fact is planted, in turn
POSITIONS = ("early user", "late user", "tool output", "final answer")
FORMATS = ("codex", "claude-code", "responses", "chat")
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "do", "fa")
_FILLER_TASKS = [
    "Rename the helper in {f} and update its callers.",
    "Add a test for the empty input case in {f}.",
    "Why does the linter complain about {f}?",
    "Format {f} and fix the import order.",
    "Split {f} into two modules, it is getting long.",
    "Look at the failing check on {f} and fix it.",
    "Add type hints to the public functions of {f}.",
    "Remove the dead code path in {f}.",
]
_FILLER_ANSWERS = [
    "Done: {f} is updated and the tests pass.",
    "I changed {f}; the full suite is green.",
    "Fixed. The problem in {f} was an off-by-one in the loop.",
    "Updated {f} and reran the checks, all good.",
]
_COMMANDS = ["pytest -q", "ruff check .", "mypy src", "git diff --stat", "make lint", "ls src"]
_OUTPUTS = [
    "12 passed in 0.84s",
    "All checks passed!",
    "Success: no issues found",
    " 3 files changed, 41 insertions(+), 9 deletions(-)",
    "ok",
    "app.py util.py",
]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randrange(2, 4)))


@dataclass
class Fact:
    """One planted fact: its sentence, the question asked about it, its value (the evidence),
    and where it was planted."""

    text: str
    question: str
    value: str
    position: str
    conversation: str


@dataclass
class Conversation:
    """One generated conversation: ``turns`` of (user, command, output, answer)."""

    name: str
    format: str
    turns: list[tuple[str, str, str, str]] = field(default_factory=list)


def _subjects(rng: random.Random) -> list[tuple[int, int, int, int]]:
    every = [
        (c, a, k, t)
        for c in range(len(CADENCES))
        for a in range(len(AREAS))
        for k in range(len(COMPONENTS))
        for t in range(len(ATTRIBUTES))
    ]
    rng.shuffle(every)
    return every


def _overlaps(value: str, used: set[str]) -> bool:
    """Whether ``value`` is a used value, part of one, or holds one ("10x" in "210x"): a hit
    showing another fact would then count as evidence for this one."""
    return any(value in other or other in value for other in used)


def _fact(
    rng: random.Random, subject: tuple[int, int, int, int], used: set[str], keep: int
) -> Fact:
    """The fact of ``subject``; its question names ``keep`` (0..2) of the subject's three
    parts by their own word, the others by a synonym."""
    c, a, k, t = subject
    fact_t, question_t, value_of = ATTRIBUTES[t]
    for _ in range(10_000):  # values are drawn until one is new: never forever
        value = value_of(rng)
        if not _overlaps(value, used):
            break
    else:
        raise ValueError(f"no new value for {fact_t!r}: too many facts for its value range")
    used.add(value)
    names = {"c": CADENCES[c][0], "a": AREAS[a][0], "k": COMPONENTS[k][0], "v": value}
    parts = [("C", CADENCES[c]), ("A", AREAS[a]), ("K", COMPONENTS[k])]
    kept = set(rng.sample(range(3), keep))
    synonyms = {key: pair[0 if i in kept else 1] for i, (key, pair) in enumerate(parts)}
    return Fact(fact_t.format(**names), question_t.format(**synonyms), value, "", "")


def generate(
    conversations: int,
    max_turns: int = 100,
    facts_per: int = 2,
    seed: int = 14,
    max_facts: int | None = None,
) -> tuple[list[Conversation], list[Fact]]:
    """``conversations`` conversations of 4..``max_turns`` turns each, with ``facts_per``
    planted facts each (positions rotating over ``POSITIONS``), at most ``max_facts`` in all
    (the first conversations get them; the rest of the corpus is filler)."""
    rng = random.Random(seed)
    subjects = _subjects(rng)
    if max_facts is not None:
        subjects = subjects[:max_facts]
    used: set[str] = set()
    convs: list[Conversation] = []
    facts: list[Fact] = []
    slot = 0
    for n in range(conversations):
        conv = Conversation(f"conv{n:05d}", FORMATS[n % len(FORMATS)])
        count = rng.randrange(4, max(5, max_turns + 1))
        module = f"{_word(rng)}.py"
        for _ in range(count):
            conv.turns.append(
                (
                    rng.choice(_FILLER_TASKS).format(f=module),
                    rng.choice(_COMMANDS),
                    rng.choice(_OUTPUTS),
                    rng.choice(_FILLER_ANSWERS).format(f=module),
                )
            )
        for _ in range(facts_per):
            if slot == len(subjects):
                break  # every subject planted once: the rest of the corpus is filler
            fact = _fact(rng, subjects[slot], used, keep=slot % 3)
            fact.position = POSITIONS[slot % len(POSITIONS)]
            fact.conversation = conv.name
            slot += 1
            _plant(rng, conv, fact)
            facts.append(fact)
        convs.append(conv)
    return convs, facts


def _plant(rng: random.Random, conv: Conversation, fact: Fact) -> None:
    last = len(conv.turns) - 1
    early = min(last, rng.randrange(0, 3))
    late = max(0, last - rng.randrange(0, 3))
    index = {"early user": early, "late user": late}.get(fact.position, rng.randrange(0, last + 1))
    user, command, output, answer = conv.turns[index]
    if fact.position in ("early user", "late user"):
        user = f"{user} By the way, remember this: {fact.text}"
    elif fact.position == "tool output":
        command = f"cat config/{_word(rng)}.md"
        output = f"# notes\n{fact.text}\n"
    else:
        answer = f"{answer} Also, for the record: {fact.text}"
    conv.turns[index] = (user, command, output, answer)


# ---------------------------------------------------------------- writing the formats


def _ts(n: int) -> str:
    return f"2026-11-20T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000Z"


def _codex(conv: Conversation) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"timestamp": _ts(0), "type": "session_meta",
         "payload": {"id": f"{conv.name}-0000-0000-0000-000000000000", "cwd": "/srv/app"}},
    ]  # fmt: skip
    for n, (user, command, output, answer) in enumerate(conv.turns):
        call = f"c{n}"
        items = [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": user}]},
            {"type": "function_call", "name": "shell", "call_id": call,
             "arguments": json.dumps({"command": ["bash", "-lc", command]})},
            {"type": "function_call_output", "call_id": call,
             "output": json.dumps({"output": output, "metadata": {"exit_code": 0}})},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": answer}]},
        ]  # fmt: skip
        rows += [{"timestamp": _ts(n + 1), "type": "response_item", "payload": i} for i in items]
    return rows


def _claude(conv: Conversation) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    sid = f"{conv.name}-1111-1111-1111-111111111111"

    def row(kind: str, content: Any, n: int) -> dict[str, Any]:
        return {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/srv",
                "sessionId": sid, "version": "2.1.332", "type": kind,
                "message": {"role": kind, "content": content}, "uuid": f"u{len(rows)}",
                "timestamp": _ts(n)}  # fmt: skip

    for n, (user, command, output, answer) in enumerate(conv.turns):
        tool = f"t{n}"
        rows.append(row("user", user, n))
        rows.append(
            row("assistant", [{"type": "tool_use", "id": tool, "name": "Bash",
                               "input": {"command": command}}], n)
        )  # fmt: skip
        rows.append(
            row("user", [{"type": "tool_result", "tool_use_id": tool, "content": output}], n)
        )
        rows.append(row("assistant", [{"type": "text", "text": answer}], n))
    return rows


def _responses(conv: Conversation) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for n, (user, command, output, answer) in enumerate(conv.turns):
        call = f"f{n}"
        rows += [
            {"role": "user", "content": user},
            {"type": "function_call", "call_id": call, "name": "shell",
             "arguments": json.dumps({"cmd": command})},
            {"type": "function_call_output", "call_id": call, "output": output},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": answer, "annotations": []}]},
        ]  # fmt: skip
    return rows


def _chat(conv: Conversation) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding assistant."}]
    for n, (user, command, output, answer) in enumerate(conv.turns):
        call = f"call_{n}"
        rows += [
            {"role": "user", "content": user},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call, "type": "function",
                 "function": {"name": "shell", "arguments": json.dumps({"cmd": command})}}]},
            {"role": "tool", "tool_call_id": call, "content": output},
            {"role": "assistant", "content": answer},
        ]  # fmt: skip
    return rows


WRITERS = {"codex": _codex, "claude-code": _claude, "responses": _responses, "chat": _chat}


def write_sources(convs: list[Conversation], top: Path) -> dict[str, list[Path]]:
    """Each conversation as a transcript file of its format under ``top``; the files by
    format."""
    by_format: dict[str, list[Path]] = {f: [] for f in FORMATS}
    for conv in convs:
        folder = top / conv.format
        folder.mkdir(parents=True, exist_ok=True)
        if conv.format == "codex":
            name = f"rollout-2026-11-20T00-00-00-{conv.name}-0000-0000-0000-000000000000.jsonl"
        else:
            name = f"{conv.name}.jsonl"
        path = folder / name
        rows = WRITERS[conv.format](conv)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        by_format[conv.format].append(path)
    return by_format


def raw_text(path: Path) -> str:
    """Every string in a transcript file (what plain BM25 over the raw transcript sees)."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            try:
                inner = json.loads(value)
            except ValueError:
                out.append(value)
                return
            if isinstance(inner, dict | list):
                walk(inner)
            else:
                out.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            walk(json.loads(line))
    return "\n".join(out)
