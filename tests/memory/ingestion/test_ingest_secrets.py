"""A planted secret in any position of any format reaches no file under ``sessions/`` or
``memories/`` (issue 27), checked exhaustively: for each format a small transcript covers its
shapes (messages, reasoning, tool calls and outputs, shell and patch calls, sub-agents,
errors, bookkeeping records, unknown types), and one variant of it is written per position —
every string value, every object key, every value inside a JSON string (plain and with its
characters ``\\u``-escaped) and the file name — holding a secret of its own (an OpenAI,
Anthropic, AWS or GitHub key or a JWT, in turn). All variants of a format are ingested into
one workspace and generated with the ``extractive`` engine; then no file (nor file name)
under ``sessions/`` or ``memories/`` holds any of the secrets, read as bytes or with its JSON
unescaped."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ingest_fixtures import add_agents_rows, agents_db

from sandmem.memory import generate_sync, ingest_sync

Rows = list[dict[str, Any]]
Path_ = tuple[Any, ...]


def secret_for(index: int) -> str:
    """A secret of its own for variant ``index``, of one of five kinds in turn."""
    n = f"{index:06d}"
    kinds = (
        f"sk-proj-Ab{n}Zq8Xv2Lm4Np6Rt0Yw3Bc5Df7",
        f"sk-ant-api03-{n}Kx9Lm2Nq4Rs6Tu8Vw0",
        f"AKIA{n}QZT7RW5YV2",
        f"ghp_{n}R4nd0mT0k3nV4lu3F0rT3st1ngXyZ12",
        f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOi{n}.dozjgNryP4J3jVmNHl0w5N",
    )
    return kinds[index % len(kinds)]


def escaped(secret: str) -> str:
    """``secret`` as a JSON string body with each letter ``\\u``-escaped."""
    return "".join(f"\\u{ord(c):04x}" if c.isalpha() else c for c in secret)


# ---------------------------------------------------------------- the transcripts


def _cx(kind: str, payload: dict[str, Any], ts: str = "2026-11-20T10:00:00.000Z") -> Any:
    return {"timestamp": ts, "type": kind, "payload": payload}


def _args(value: dict[str, Any]) -> str:
    return json.dumps(value)


CODEX: Rows = [
    _cx(
        "session_meta",
        {
            "id": "SID",
            "timestamp": "2026-11-20T10:00:00.000Z",
            "cwd": "/home/dev/shop",
            "originator": "codex_cli_rs",
            "cli_version": "0.171.0",
            "git": {"branch": "main", "commit_hash": "abc123"},
        },
    ),
    _cx("turn_context", {"cwd": "/home/dev/shop", "model": "gpt-5-codex"}),
    _cx(
        "response_item",
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]},
    ),
    _cx(
        "response_item",
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "thinking about it"}],
            "encrypted_content": "gAAAAB",
        },
    ),
    _cx(
        "response_item",
        {
            "type": "function_call",
            "name": "shell",
            "call_id": "c1",
            "arguments": _args({"command": ["bash", "-lc", "pytest -q"], "workdir": "/w"}),
        },
    ),
    _cx(
        "response_item",
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": _args({"output": "1 failed", "metadata": {"exit_code": 1}}),
        },
    ),
    _cx(
        "response_item",
        {
            "type": "function_call",
            "name": "memory_search",
            "namespace": "mcp__memory",
            "call_id": "c2",
            "arguments": _args({"query": "money"}),
        },
    ),
    _cx(
        "response_item",
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "Wall time: 1 s\nOutput:\nhit"}],
        },
    ),
    _cx(
        "response_item",
        {
            "type": "custom_tool_call",
            "name": "apply_patch",
            "call_id": "c3",
            "input": "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n",
        },
    ),
    _cx("response_item", {"type": "custom_tool_call_output", "call_id": "c3", "output": "Done"}),
    _cx(
        "response_item",
        {
            "type": "local_shell_call",
            "call_id": "c4",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls", "-la"], "working_directory": "/w"},
        },
    ),
    _cx(
        "response_item",
        {"type": "web_search_call", "status": "completed", "action": {"query": "decimal"}},
    ),
    _cx(
        "response_item",
        {
            "type": "agent_message",
            "author": "/root/kepler",
            "recipient": "/root",
            "content": [{"type": "input_text", "text": "found it"}],
        },
    ),
    _cx("event_msg", {"type": "error", "message": "stream disconnected"}),
    _cx("event_msg", {"type": "turn_aborted", "reason": "interrupted"}),
    _cx("compacted", {"message": "summary of earlier work"}),
    _cx("a_future_record", {"field": "value"}),
    _cx(
        "response_item",
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}],
        },
    ),
]

CODEX_SUBAGENT: Rows = [
    _cx(
        "session_meta",
        {
            "id": "SID",
            "cwd": "/w",
            "source": {"subagent": {"thread_spawn": {"parent_thread_id": "PARENT", "depth": 1}}},
        },
    ),
    _cx(
        "response_item",
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a task"}]},
    ),
    _cx(
        "response_item",
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
    ),
]

CODEX_EARLY: Rows = [
    {"id": "SID", "timestamp": "2025-06-01T09:00:00.000Z", "instructions": None},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "why"}]},
    {"type": "function_call", "name": "shell", "call_id": "e1", "arguments": '{"command": ["ls"]}'},
    {"type": "function_call_output", "call_id": "e1", "output": '{"output": "no"}'},
    {"record_type": "state"},
]


def _cl(kind: str, content: Any, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "parentUuid": "p",
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/ana/app",
        "sessionId": "SID",
        "version": "2.1.332",
        "gitBranch": "main",
        "type": kind,
        "message": {"role": kind, "content": content},
        "uuid": "u",
        "timestamp": "2026-11-21T08:00:00.000Z",
    }
    row.update(extra)
    return row


CLAUDE: Rows = [
    {"type": "summary", "summary": "a title", "leafUuid": "l"},
    {"type": "queue-operation", "operation": "enqueue", "content": "the task"},
    _cl("user", "the task"),
    _cl("user", [{"type": "text", "text": "more"}, {"type": "image", "source": {"data": "iVBO"}}]),
    _cl("assistant", [{"type": "thinking", "thinking": "hmm", "signature": "sig"}]),
    _cl("assistant", [{"type": "redacted_thinking", "data": "opaque"}]),
    _cl("assistant", [{"type": "text", "text": "let me run it"}]),
    _cl(
        "assistant",
        [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest -q"}}],
    ),
    _cl(
        "user",
        [{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": "Exit code 1"}],
        toolUseResult={"stdout": "out", "stderr": "err"},
    ),
    _cl(
        "assistant",
        [{"type": "tool_use", "id": "t2", "name": "Edit", "input": {"file_path": "/a/b.py"}}],
    ),
    _cl(
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "t2",
                "content": [{"type": "text", "text": "updated"}],
            }
        ],
    ),
    _cl("user", "a sub-agent's task", isSidechain=True, agentId="ag1"),
    _cl("assistant", [{"type": "text", "text": "sub-agent answer"}], isSidechain=True),
    {
        "type": "attachment",
        "sessionId": "SID",
        "attachment": {"type": "queued_command", "prompt": "typed while busy"},
    },
    {
        "type": "attachment",
        "sessionId": "SID",
        "attachment": {"type": "mcp_instructions_delta", "addedBlocks": ["server notes"]},
    },
    {"type": "api-request-blob", "message": {"role": "user", "content": "a copy of the prompt"}},
    {"type": "system", "subtype": "compact_boundary", "content": "compacted"},
    _cl("user", "a compaction summary", isCompactSummary=True),
    _cl("user", "<command-name>/clear</command-name>"),
    _cl("assistant", [{"type": "text", "text": "API Error: overloaded"}], isApiErrorMessage=True),
    _cl("assistant", [{"type": "text", "text": "done"}]),
]

ITEMS: Rows = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "user", "content": "refund for order 4411?"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}]},
    {
        "type": "function_call",
        "call_id": "f1",
        "name": "lookup",
        "arguments": _args({"order": 4411, "note": "x"}),
    },
    {"type": "function_call_output", "call_id": "f1", "output": "order 4411: delivered"},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "refundable", "annotations": []}],
    },
]

CHAT: Rows = [
    {"role": "system", "content": "You are a coding assistant."},
    {"role": "user", "content": "convert to zoneinfo"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "k1",
                "type": "function",
                "function": {"name": "run", "arguments": _args({"cmd": "pytest"})},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "k1", "content": "exit_code: 1\nModuleNotFoundError"},
    {"role": "user", "content": [{"type": "text", "text": "again"}]},
    {"role": "assistant", "content": "converted"},
]


# ---------------------------------------------------------------- planting


@dataclass(frozen=True)
class Spot:
    """A place a secret can be: a string value, an object key, or a value inside a JSON
    string (``inner``, optionally written with ``\\u`` escapes)."""

    path: Path_
    how: str  # "value", "key", "inner", "inner-escaped"
    inner: Path_ = ()


def _leaves(value: Any, path: Path_ = ()) -> Iterator[tuple[Path_, str, Any]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*path, key), "key", key
            yield from _leaves(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _leaves(child, (*path, index))
    elif isinstance(value, str):
        yield path, "value", value


def _kind(row: Any) -> str:
    """What a row is, as a parser tells it apart (its type, role, flags, payload type and
    first block's type): rows of one kind are read alike."""
    if not isinstance(row, dict):
        return type(row).__name__
    payload, body = row.get("payload"), row.get("message")
    content = body.get("content") if isinstance(body, dict) else row.get("content")
    first = content[0] if isinstance(content, list) and content else None
    return json.dumps(
        [
            {k: row.get(k) for k in ("type", "role", "isSidechain", "isCompactSummary")},
            payload.get("type") if isinstance(payload, dict) else None,
            first.get("type") if isinstance(first, dict) else type(content).__name__,
            sorted(row),
        ]
    )


def spots(rows: Rows) -> list[Spot]:
    """Every place of ``rows`` a secret can be, once per kind of row (a key every entry has,
    such as Claude Code's ``cwd``, is planted in one entry of each kind, not in all)."""
    found: dict[tuple[Any, ...], Spot] = {}

    def add(spot: Spot) -> None:
        general = tuple("*" if isinstance(p, int) else p for p in spot.path[1:])
        row = rows[spot.path[0]]
        # a key of the entry itself (Claude Code's cwd, version, uuid...) is read alike in
        # every entry of one type
        kind = row.get("type") if len(spot.path) == 2 else _kind(row)
        found.setdefault((kind, general, spot.how, spot.inner), spot)

    for path, how, value in _leaves(rows):
        add(Spot(path, how))
        if how == "value":
            try:
                inner = json.loads(value)
            except ValueError:
                continue
            if isinstance(inner, dict | list):
                for inner_path, inner_how, _ in _leaves(inner):
                    if inner_how == "value":
                        add(Spot(path, "inner", inner_path))
                        add(Spot(path, "inner-escaped", inner_path))
    return list(found.values())


#: names whose place decides how other entries are read (the session's identity, kinds and
#: roles, the links between calls and their outputs): a secret there is planted alone
STRUCTURAL = frozenset(
    {"id", "sessionId", "session_id", "agentId", "parent_thread_id", "source", "type", "role"}
    | {"isSidechain", "call_id", "tool_use_id", "tool_call_id", "name", "namespace"}
)


def variants(rows: Rows) -> list[list[Spot]]:
    """The spots grouped into variants: a structural spot (and any spot in the first row)
    alone; the others together, at most one per row, so one variant never plants twice
    in an entry."""
    solo: list[list[Spot]] = []
    batches: list[list[Spot]] = []
    for spot in spots(rows):
        last = (spot.inner or spot.path)[-1]
        if spot.path[0] == 0 or last in STRUCTURAL:
            solo.append([spot])
            continue
        batch = next((b for b in batches if all(s.path[0] != spot.path[0] for s in b)), None)
        if batch is None:
            batches.append(batch := [])
        batch.append(spot)
    return solo + batches


def _get(value: Any, path: Path_) -> Any:
    for part in path:
        value = value[part]
    return value


def _set(value: Any, path: Path_, new: Any) -> None:
    _get(value, path[:-1])[path[-1]] = new


def _with(text: str, secret: str) -> str:
    """A secret in a string's place: the whole of a short one (an id, a type, a name), inside
    a longer one (a message)."""
    return secret if len(text) < 12 else f"{text[:6]} {secret} {text[6:]}"


def plant(rows: Rows, spot: Spot, secret: str) -> Rows:
    """A copy of ``rows`` with ``secret`` at ``spot``."""
    rows = copy.deepcopy(rows)
    if spot.how == "key":
        parent, key = _get(rows, spot.path[:-1]), spot.path[-1]
        parent[secret] = parent.pop(key)
    elif spot.how == "value":
        _set(rows, spot.path, _with(_get(rows, spot.path), secret))
    else:
        inner = json.loads(_get(rows, spot.path))
        marker = "PLANTED-" + "x" * 8
        _set(inner, spot.inner, _with(_get(inner, spot.inner), marker))
        body = secret if spot.how == "inner" else escaped(secret)
        _set(rows, spot.path, json.dumps(inner).replace(marker, body))
    return rows


def _identify(rows: Rows, session_id: str) -> Rows:
    """Give a variant a session of its own (every ``"SID"`` replaced), so the variants of
    one format are separate conversations of one workspace."""
    text = json.dumps(rows).replace('"SID"', json.dumps(session_id))
    text = text.replace('"PARENT"', json.dumps(f"parent-{session_id}"))
    found: Rows = json.loads(text)
    return found


# ---------------------------------------------------------------- writers


def _jsonl(path: Path, rows: Rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _json_list(path: Path, rows: Rows) -> None:
    path.write_text(json.dumps(rows), encoding="utf-8")


def _chat_body(path: Path, rows: Rows) -> None:
    path.write_text(json.dumps({"model": "gpt-x", "messages": rows}), encoding="utf-8")


def _database(path: Path, rows: Rows, session_id: str) -> None:
    agents_db(path).close()
    add_agents_rows(path, session_id, rows)


@dataclass(frozen=True)
class Format:
    name: str  # the --format to ingest with
    rows: Rows
    write: Callable[[Path, str, Rows, str], None]  # (directory, variant, rows, secret)


def _file_writer(suffix: str, write: Callable[[Path, Rows], None], identified: bool) -> Any:
    def writer(root: Path, variant: str, rows: Rows, secret: str) -> None:
        rows = _identify(rows, f"s-{variant}") if identified else rows
        write(root / f"{variant}{suffix}", rows)

    return writer


def _db_writer(root: Path, variant: str, rows: Rows, secret: str) -> None:
    _database(root / "sessions.db", rows, f"s-{variant}")


FORMATS = {
    "codex": Format("codex", CODEX, _file_writer(".jsonl", _jsonl, True)),
    "codex-subagent": Format("codex", CODEX_SUBAGENT, _file_writer(".jsonl", _jsonl, True)),
    "codex-early": Format("codex", CODEX_EARLY, _file_writer(".jsonl", _jsonl, True)),
    "claude-code": Format("claude-code", CLAUDE, _file_writer(".jsonl", _jsonl, True)),
    "agents-db": Format("openai-agents", ITEMS, _db_writer),
    "input-list": Format("openai-agents", ITEMS, _file_writer(".json", _json_list, False)),
    "responses": Format("responses", ITEMS, _file_writer(".jsonl", _jsonl, False)),
    "chat": Format("chat", CHAT, _file_writer(".json", _chat_body, False)),
    "chat-jsonl": Format("chat", CHAT, _file_writer(".jsonl", _jsonl, False)),
}


def _contents(path: Path) -> str:
    """A file's text, and for JSON Lines also with every string unescaped."""
    text = path.read_bytes().decode("utf-8", "replace")
    decoded = []
    for line in text.splitlines():
        try:
            decoded.append(json.dumps(json.loads(line), ensure_ascii=False))
        except ValueError:
            continue
    return text + "\n".join(decoded)


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_no_planted_secret_reaches_disk(tmp_path: Path, kind: str) -> None:
    fmt = FORMATS[kind]
    source, workspace = tmp_path / "source", tmp_path / "ws"
    source.mkdir()
    workspace.mkdir()
    planted: dict[str, str] = {}
    for number, group in enumerate(variants(fmt.rows)):
        rows = fmt.rows
        for spot in group:
            secret = secret_for(len(planted))
            rows = plant(rows, spot, secret)
            planted[secret] = f"{kind} {spot}"
        fmt.write(source, f"v{number:04d}", rows, "")
    # the file name is a position too
    name_secret = secret_for(len(planted))
    fmt.write(source, f"n-{name_secret}", copy.deepcopy(fmt.rows), name_secret)
    planted[name_secret] = f"{kind} file name"

    report = ingest_sync(workspace, [source], format=fmt.name)  # type: ignore[arg-type]
    recorded = sum(s.segments for s in report.sources)
    assert recorded >= len(planted) // 2, report  # most variants were ingested, not skipped
    generation = generate_sync(workspace, engine="extractive")
    assert not generation.failed, generation

    leaks = []
    for directory in ("sessions", "memories"):
        for path in (workspace / directory).rglob("*"):
            text = path.name + ("\n" + _contents(path) if path.is_file() else "")
            leaks += [f"{planted[s]} -> {path.name}" for s in planted if s in text]
    assert not leaks, "\n".join(leaks)
