"""Claude Code session files (``~/.claude/projects/<project>/<session>.jsonl``) as canonical
items. Pure: lines in, events out.

Each line is one entry: ``type`` ``user`` or ``assistant`` with ``message.content`` (a string,
or blocks: ``text``, ``thinking`` / ``redacted_thinking``, ``tool_use``, ``tool_result``,
``image``), ``summary`` (a title for the session), ``system`` (notices, compaction
boundaries), ``attachment`` (context Claude Code added: the environment, hook output, MCP
server instructions, ... and ``queued_command``: a prompt the user typed while the agent was
busy, kept as a user message), and bookkeeping entries (``file-history-snapshot``,
``queue-operation``, ``api-request``, ``cost-state``, ...). A ``user`` entry marked
``isCompactSummary`` is the summary that replaced history at a compaction, not the user.
Entries carry ``uuid``, ``parentUuid``, ``sessionId``, ``cwd``, ``timestamp``, ``gitBranch``
and ``isSidechain`` (true for a sub-agent's work, in the same file or in a file of its own
under ``subagents/``). Tool results are ``user`` entries; the ``Bash`` tool's results are
read as exit codes (an error result is a failed command).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from sandmem._items import content_text
from sandmem.memory.ingestion._model import (
    Event,
    Line,
    SourceMeta,
    as_dict,
    call_output,
    exec_call,
    iso_time,
    message,
    tool_call,
)

ENTRY_TYPES = frozenset({"user", "assistant", "summary", "system"})
_SHELL_TOOLS = frozenset({"Bash", "BashOutput"})
_EXIT_LINE = re.compile(r"^\s*Exit code:?\s*(-?\d+)\s*\n?", re.I)
#: user text Claude Code writes itself: local command echoes and caveats
_LOCAL_COMMAND = re.compile(
    r"^\s*<(command-name|command-message|local-command-stdout|"
    r"local-command-stderr|command-args|system-reminder|task-notification)>"
)
_INTERRUPTED = "[Request interrupted by user"


def claude_events(lines: Iterable[Line], meta: SourceMeta) -> Iterator[Event]:
    """The events of a Claude Code session; ``meta`` gets the session id, cwd, start time and
    title (from a ``summary`` entry), and counts what was dropped."""
    tools: dict[str, str] = {}  # tool_use id -> tool name
    for line in lines:
        data = line.data
        if data is None:
            continue
        time = iso_time(data.get("timestamp"))
        _learn(data, time, meta)
        for event in _entry(data, tools, meta):
            event.pos, event.end, event.time = line.pos, line.end, time
            yield event


def _learn(entry: dict[str, Any], time: str | None, meta: SourceMeta) -> None:
    """What an entry tells about the session: its id, working directory, start and title."""
    if isinstance(entry.get("sessionId"), str) and meta.session_id is None:
        meta.session_id = entry["sessionId"]
    if isinstance(entry.get("cwd"), str):
        meta.cwd = entry["cwd"]
    if time is not None and meta.started_at is None:
        meta.started_at = time
    if entry.get("type") == "summary" and isinstance(entry.get("summary"), str):
        meta.title = entry["summary"]


def _entry(entry: dict[str, Any], tools: dict[str, str], meta: SourceMeta) -> list[Event]:
    kind = entry.get("type")
    if kind == "summary":
        meta.drop("summary")
        return []
    if kind == "attachment":
        return _attachment(entry, meta)
    if kind not in ("user", "assistant"):
        meta.drop(f"entry:{kind}")
        return []
    if entry.get("isCompactSummary"):
        meta.drop("compact_summary")
        return []
    body = entry.get("message")
    if not isinstance(body, dict):
        meta.drop("malformed_line")
        return []
    side = bool(entry.get("isSidechain"))
    if kind == "user":
        return _user(body, entry, side, tools, meta)
    return _assistant(body, entry, side, tools, meta)


def _attachment(entry: dict[str, Any], meta: SourceMeta) -> list[Event]:
    """A prompt the user typed while the agent was busy (``queued_command`` from a human), as
    a user message; any other attachment is context Claude Code added: dropped."""
    found = as_dict(entry.get("attachment"))
    kind = found.get("type")
    prompt = found.get("prompt")
    origin = as_dict(found.get("origin")).get("kind", "human")
    typed = found.get("commandMode", "prompt") == "prompt" and origin == "human"
    if kind == "queued_command" and typed and isinstance(prompt, str) and prompt.strip():
        if entry.get("isSidechain"):
            return [Event(0, message("assistant", f"(sub-agent task) {prompt}"))]
        return [Event(0, message("user", prompt), turn=True)]
    meta.drop(f"attachment:{kind}")
    return []


def _blocks(body: dict[str, Any], meta: SourceMeta) -> list[dict[str, Any]]:
    """A message's content blocks (a string is one text block); malformed ones dropped."""
    content = body.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = content if isinstance(content, list) else []
    for block in blocks:
        if not isinstance(block, dict):
            meta.drop("malformed_block")
    return [block for block in blocks if isinstance(block, dict)]


def _user(
    body: dict[str, Any],
    entry: dict[str, Any],
    side: bool,
    tools: dict[str, str],
    meta: SourceMeta,
) -> list[Event]:
    events: list[Event] = []
    texts: list[str] = []
    for block in _blocks(body, meta):
        kind = block.get("type")
        if kind == "tool_result":
            events.append(Event(0, _result(block, entry, tools)))
        elif kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind in ("image", "document"):
            texts.append(f"[{kind} attached]")
            meta.drop(kind)
        else:
            meta.drop(f"block:{kind}")
    text = "\n".join(t for t in texts if t.strip())
    if not text.strip():
        return events
    if text.lstrip().startswith(_INTERRUPTED):
        events.append(Event(0, None, interrupted=True))
        meta.drop("interruption_notice")
    elif entry.get("isMeta") or _LOCAL_COMMAND.match(text):
        meta.drop("meta_message")
    elif side:  # the prompt the main agent gave a sub-agent: not the user speaking
        events.append(Event(0, message("assistant", f"(sub-agent task) {text}")))
    else:
        events.append(Event(0, message("user", text), turn=True))
    return events


def _result(block: dict[str, Any], entry: dict[str, Any], tools: dict[str, str]) -> Any:
    call_id = str(block.get("tool_use_id") or "")
    raw = block.get("content")
    text = content_text(raw, sep="\n")
    if isinstance(raw, list) and any(isinstance(p, dict) and p.get("type") == "image" for p in raw):
        text = (text + "\n[image omitted]").strip()
    failed = bool(block.get("is_error"))
    if tools.get(call_id) in _SHELL_TOOLS:
        match = _EXIT_LINE.match(text)
        if match is not None:
            return call_output(call_id, text[match.end() :], int(match.group(1)))
        extra = entry.get("toolUseResult")
        if isinstance(extra, dict) and not text.strip():
            text = "\n".join(
                str(extra[k]) for k in ("stdout", "stderr") if isinstance(extra.get(k), str)
            )
        if failed and text.lstrip().startswith(_INTERRUPTED):
            return call_output(call_id, text)
        return call_output(call_id, text, 1 if failed else 0)
    if failed:
        text = f"error: {text}"
    return call_output(call_id, text)


def _assistant(
    body: dict[str, Any],
    entry: dict[str, Any],
    side: bool,
    tools: dict[str, str],
    meta: SourceMeta,
) -> list[Event]:
    events: list[Event] = []
    for block in _blocks(body, meta):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str) and block["text"].strip():
            text = block["text"]
            if entry.get("isApiErrorMessage"):
                events.append(Event(0, None, error=text, error_type="ClaudeApiError"))
                continue
            events.append(Event(0, message("assistant", f"(sub-agent) {text}" if side else text)))
        elif kind == "tool_use":
            call_id = str(block.get("id") or "")
            name = str(block.get("name") or "")
            args = as_dict(block.get("input"))
            tools[call_id] = name
            if name == "Bash" and isinstance(args.get("command"), str):
                events.append(Event(0, exec_call(call_id, args["command"], entry.get("cwd"))))
            else:
                events.append(Event(0, tool_call(call_id, name, args)))
        elif kind in ("thinking", "redacted_thinking"):
            meta.drop("thinking")
        else:
            meta.drop(f"block:{kind}")
    return events
