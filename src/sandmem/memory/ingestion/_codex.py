"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) as canonical
items. Pure: lines in, events out.

Each line is ``{"timestamp", "type", "payload"}`` with ``type`` one of ``session_meta`` (the
session id, cwd, CLI version), ``turn_context`` (cwd, model, policies), ``response_item`` (a
Responses item: message, reasoning, function_call / function_call_output,
custom_tool_call / custom_tool_call_output, local_shell_call, web_search_call, ...),
``event_msg`` (UI events, most of which repeat response items) and ``compacted`` (a summary
that replaced history in the model's context). Files of early versions hold the session meta
and the items bare, without the wrapper; they are read too.

A sub-agent (a thread another thread spawned) has a rollout file of its own whose session
meta names its parent (``source: {"subagent": {"thread_spawn": {"parent_thread_id"}}}``): it
joins the parent's conversation, its task kept as ``(sub-agent task) ...`` and its messages
as ``(sub-agent) ...``, never as the user's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from sandmem._items import content_text
from sandmem.memory.ingestion._model import (
    Event,
    Line,
    SourceMeta,
    as_dict,
    bound_value,
    call_output,
    exec_call,
    iso_time,
    message,
    patch_call,
    tool_call,
)

WRAPPER_TYPES = frozenset(
    {"session_meta", "turn_context", "response_item", "event_msg", "compacted"}
)
_SHELL_TOOLS = frozenset(
    {"shell", "container.exec", "shell_command", "exec_command", "local_shell"}
)
#: user-role messages Codex writes itself: the environment and the AGENTS.md instructions
_CONTEXT_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<INSTRUCTIONS>",
)
_PASSED_THROUGH = frozenset({"web_search_call"})


def subagent_parent(payload: dict[str, Any]) -> str | None:
    """The parent thread id a sub-agent's session meta names, else ``None``."""
    source = as_dict(payload.get("source"))
    spawn = as_dict(as_dict(source.get("subagent")).get("thread_spawn"))
    parent = spawn.get("parent_thread_id")
    return parent if isinstance(parent, str) and parent else None


def codex_events(lines: Iterable[Line], meta: SourceMeta) -> Iterator[Event]:
    """The events of a Codex rollout; ``meta`` gets the session id (a sub-agent's parent's),
    cwd and start time, and counts what was dropped."""
    side = False  # a sub-agent's rollout
    for line in lines:
        if line.data is None:
            continue
        record = _record(line, meta)
        if record is None:
            continue
        kind, payload = record
        if kind == "session_meta":
            side = _session_meta(payload, meta) or side
            continue
        if kind == "turn_context":
            if isinstance(payload.get("cwd"), str):
                meta.cwd = payload["cwd"]
            continue
        if kind == "compacted":  # a summary of history that is in the file already
            meta.drop("compacted")
            continue
        if kind == "response_item":
            found = _response_item(payload, meta)
            if side:
                found = [_as_subagent(event) for event in found]
        else:
            event = _event_msg(payload, meta)
            found = [event] if event is not None else []
        time = iso_time(line.data.get("timestamp"))
        for event in found:
            event.pos, event.end, event.time = line.pos, line.end, time
            yield event


def _record(line: Line, meta: SourceMeta) -> tuple[str, dict[str, Any]] | None:
    """A line's record type and payload; early files hold the meta and the items bare."""
    data = line.data
    assert data is not None
    kind = data.get("type")
    payload = data.get("payload")
    if kind not in WRAPPER_TYPES:
        if "payload" in data:  # a record type of a newer Codex
            meta.drop(f"record:{kind}")
            return None
        if line.pos == 0 and "id" in data and "type" not in data:
            kind, payload = "session_meta", data
        elif isinstance(kind, str):
            kind, payload = "response_item", data
        else:
            meta.drop("unknown_line")
            return None
    if not isinstance(payload, dict):
        meta.drop("malformed_line")
        return None
    return str(kind), payload


def _session_meta(payload: dict[str, Any], meta: SourceMeta) -> bool:
    """Read a session meta record; True when it is a sub-agent's."""
    inner = as_dict(payload.get("meta")) or payload
    parent = subagent_parent(inner)
    if parent is not None:
        meta.session_id = parent
    elif isinstance(inner.get("id"), str) and meta.session_id is None:
        meta.session_id = inner["id"]
    if isinstance(inner.get("cwd"), str):
        meta.cwd = inner["cwd"]
    meta.started_at = meta.started_at or iso_time(inner.get("timestamp"))
    return parent is not None


def _as_subagent(event: Event) -> Event:
    """A sub-agent's message: its task is not the user speaking, its answers not the main
    agent's."""
    item = event.item
    if isinstance(item, dict) and item.get("type") == "message":
        label = "(sub-agent task)" if item.get("role") == "user" else "(sub-agent)"
        event.item = message("assistant", f"{label} {item.get('content', '')}")
        event.turn = False
    return event


def _response_item(payload: dict[str, Any], meta: SourceMeta) -> list[Event]:
    kind = payload.get("type", "message" if "role" in payload else None)
    call_id = str(payload.get("call_id") or payload.get("id") or "")
    if kind == "message":
        return _message(payload, meta)
    if kind == "function_call":
        return [Event(0, _function_call(call_id, payload, meta))]
    if kind == "agent_message":  # a message between agents of one session
        return _agent_message(payload, meta)
    if kind == "local_shell_call":
        action = as_dict(payload.get("action"))
        workdir = action.get("working_directory") or meta.cwd
        return [Event(0, exec_call(call_id, action.get("command") or "", workdir))]
    if kind == "custom_tool_call":
        name = str(payload.get("name") or "")
        raw = payload.get("input")
        if name == "apply_patch" and isinstance(raw, str):
            return [Event(0, patch_call(call_id, raw))]
        return [Event(0, tool_call(call_id, name, raw if isinstance(raw, str) else raw or {}))]
    if kind in ("function_call_output", "custom_tool_call_output"):
        text, code = _output(payload.get("output"))
        return [Event(0, call_output(call_id, text, code))]
    if kind == "reasoning":
        meta.drop("reasoning")
        return []
    if kind in _PASSED_THROUGH:
        item = {k: v for k, v in payload.items() if k != "encrypted_content"}
        return [Event(0, bound_value(item))]
    meta.drop(f"item:{kind}")
    return []


def _message(payload: dict[str, Any], meta: SourceMeta) -> list[Event]:
    role = payload.get("role")
    text = content_text(payload.get("content"), sep="\n")
    if role == "user":
        if text.lstrip().startswith(_CONTEXT_PREFIXES):
            meta.drop("context_message")
            return []
        if not text.strip():
            meta.drop("empty_message")
            return []
        return [Event(0, message("user", text), turn=True)]
    if role == "assistant":
        if not text.strip():
            meta.drop("empty_message")
            return []
        return [Event(0, message("assistant", text))]
    meta.drop(f"{role}_message")
    return []


def _agent_message(payload: dict[str, Any], meta: SourceMeta) -> list[Event]:
    content = payload.get("content")
    parts = content if isinstance(content, list) else []
    if any(isinstance(p, dict) and "encrypted_content" in p for p in parts):
        meta.drop("encrypted_content")
    text = content_text(parts, sep="\n")
    if not text.strip():
        meta.drop("empty_message")
        return []
    author, recipient = payload.get("author") or "an agent", payload.get("recipient") or "?"
    return [Event(0, message("assistant", f"(agent {author} to {recipient}) {text}"))]


def _function_call(call_id: str, payload: dict[str, Any], meta: SourceMeta) -> dict[str, Any]:
    name = str(payload.get("name") or "")
    namespace = payload.get("namespace")
    if isinstance(namespace, str) and namespace:  # an MCP server's tool: <namespace>.<tool>
        name = f"{namespace}.{name}"  # (a dot: a key glued by "_" would hide from redaction)
    raw = payload.get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        args = None
    if isinstance(args, dict) and name in _SHELL_TOOLS:
        cmd = args.get("command", args.get("cmd"))
        workdir = args.get("workdir") or meta.cwd
        if isinstance(cmd, list) and len(cmd) >= 2 and cmd[0] == "apply_patch":
            return patch_call(call_id, str(cmd[1]))
        if isinstance(cmd, str | list):
            return exec_call(call_id, cmd, workdir)
    if name == "apply_patch" and isinstance(args, dict):
        patch = args.get("input", args.get("patch"))
        if isinstance(patch, str):
            return patch_call(call_id, patch)
    return tool_call(call_id, name, raw if isinstance(raw, str) else raw or {})


def _output(value: Any) -> tuple[str, int | None]:
    """A tool output's text and exit code: older Codex writes ``{"output", "metadata":
    {"exit_code"}}`` as a JSON string; newer ones a text that starts with ``Exit code: N``
    (left for the renderer to read), or content items."""
    if isinstance(value, dict):
        value = value.get("content", value.get("output", value))
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return _status_header(value)
        if isinstance(parsed, dict) and isinstance(parsed.get("output"), str):
            metadata = as_dict(parsed.get("metadata"))
            code = metadata.get("exit_code")
            return parsed["output"], code if isinstance(code, int) else None
        return value, None
    if isinstance(value, list):  # content items (an MCP tool's result)
        return _status_header(content_text(value, sep="\n"))
    return json.dumps(value, ensure_ascii=False, default=str), None


#: a status line newer Codex versions put before a command's (or an MCP tool's) output
_HEADER_LINE = re.compile(r"^[A-Za-z][A-Za-z ]{0,40}:\s*\S.*$")
#: the status lines known to carry no output
_KNOWN_HEADER = re.compile(r"^(?:chunk id|wall time|original token count):\s*\S.*$", re.I)
_EXITED = re.compile(r"^(?:process exited with code|exit code:?)\s*(-?\d+)\s*$", re.I)


def _status_header(text: str) -> tuple[str, int | None]:
    """The output and exit code of a text such as ``Chunk ID: ..`` / ``Wall time: ..`` /
    ``Process exited with code 1`` / ``Output:`` / the output (or ``Exit code: 1`` first):
    the status lines are replaced by the exit code. Without an exit code they are dropped
    only when each is a known one (``Wall time: ..`` before an MCP tool's output); any other
    text is left as it is."""
    lines = text.split("\n")
    code: int | None = None
    known = True
    for index, line in enumerate(lines[:10]):
        stripped = line.strip()
        found = _EXITED.match(stripped)
        if found is not None:
            code = int(found.group(1))
        elif stripped == "Output:":
            if index and (code is not None or known):
                return "\n".join(lines[index + 1 :]), code
            return text, None
        elif _HEADER_LINE.match(stripped):
            known = known and bool(_KNOWN_HEADER.match(stripped))
        else:
            break
    return text, None


def _event_msg(payload: dict[str, Any], meta: SourceMeta) -> Event | None:
    kind = payload.get("type")
    if kind == "turn_aborted":
        return Event(0, None, interrupted=True)
    if kind == "error":
        text = payload.get("message")
        return Event(0, None, error=str(text or "error"), error_type="CodexError")
    meta.drop(f"event:{kind}")
    return None
