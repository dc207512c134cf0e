"""Rollouts: the memory conversation id of a run, and the run segment recorded for it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from sandmem._items import Item, item_kind
from sandmem.agent._context import RunOutcome, SandboxRunContext
from sandmem.memory._json import loads_bounded
from sandmem.memory._text import safe_text

ROLLOUT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SLUG_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def validate_rollout_id(rollout_id: str) -> str:
    """Return ``rollout_id`` stripped of whitespace when it is file-safe
    (``^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$``); raise ``ValueError`` otherwise."""
    if not isinstance(rollout_id, str):
        raise ValueError(f"rollout id must be a string, got {type(rollout_id).__name__}")
    value = rollout_id.strip()
    if not ROLLOUT_ID_PATTERN.fullmatch(value):
        raise ValueError(
            f"invalid rollout id {rollout_id!r}: use 1-128 characters from A-Z a-z 0-9 . _ - "
            "starting with a letter or digit"
        )
    return value


#: the shape of a mapped id: ``<slug>--<16 hex>`` (8 hex in early versions), in either case
#: (a case-insensitive file system would otherwise let ``X--ABC...`` share ``x--abc...``'s
#: file). A valid id of this shape is mapped too, so no valid id used as it is can equal
#: another key's mapped form
MAPPED_ID_PATTERN = re.compile(r"^.+--[0-9a-f]{8}(?:[0-9a-f]{8})?$", re.IGNORECASE)


def file_safe_rollout_id(key: str) -> str:
    """Map a conversation key to a file-safe rollout id: a slug of it (of its redacted form:
    a secret in a key never names a file), ``--``, then 16 hex of its SHA-256, so the same key
    always maps the same way and different keys get different files (ids used as they are
    never have this shape: see ``MAPPED_ID_PATTERN``)."""
    from sandmem.redaction import redact  # its patterns compile on import: only when mapping

    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    shown = redact(key.strip())
    slug = _SLUG_CHARS.sub("-", shown).strip("-._")[:100].rstrip("-._") or "conversation"
    return f"{slug}--{digest}"


def conversation_rollout_id(key: str) -> tuple[str, str | None]:
    """The rollout id of a conversation key and, when it had to be mapped, the key: a valid
    id is used as it is unless it has the mapped shape or holds something secret-shaped
    (it would name a file, a state key and span attributes); anything else is mapped."""
    from sandmem.redaction import redact

    try:
        value = validate_rollout_id(key)
    except ValueError:
        return file_safe_rollout_id(key), key
    if MAPPED_ID_PATTERN.fullmatch(value) or redact(value) != value:
        return file_safe_rollout_id(key), key
    return value, None


def new_rollout_id() -> str:
    """A fresh rollout id, ``run-<32 hex>`` (what a run without a conversation id gets)."""
    return f"run-{uuid.uuid4().hex}"


def resolve_rollout_id(ctx: SandboxRunContext) -> tuple[str, str | None]:
    """The rollout id of a run and, when it had to be mapped, the original conversation key.

    First set wins: ``conversation_id`` → the conversation session's ``session_id`` →
    ``RunConfig.group_id`` → a new id per run. The sandbox session id is never used.
    """
    for candidate in (ctx.conversation_id, _session_id(ctx), ctx.run_config.group_id):
        if candidate is None:
            continue
        if not isinstance(candidate, str) or not candidate.strip():
            raise ValueError(f"a conversation id must be a non-empty string, got {candidate!r}")
        return conversation_rollout_id(candidate)
    return new_rollout_id(), None


def _session_id(ctx: SandboxRunContext) -> str | None:
    if ctx.session is None:
        return None
    value = getattr(ctx.session, "session_id", None)
    return value if isinstance(value, str) else None


#: item types that carry the task's facts: tool calls and their outputs (as the reference
#: keeps them). Everything else — reasoning, compaction, image generation, hosted-tool items
#: such as ``file_search_call`` or ``code_interpreter_call``, unknown types — is dropped.
KEPT_ITEM_TYPES = frozenset(
    {
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "shell_call",
        "shell_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "computer_call",
        "computer_call_output",
        "mcp_call",
        "mcp_approval_request",
        "mcp_approval_response",
        "tool_search_call",
        "tool_search_output",
        "web_search_call",
    }
)
_KEPT_ROLES = frozenset({"user", "assistant", "tool"})


def keep_item(item: Item) -> bool:
    """Whether a transcript item goes into a rollout: user, assistant and tool messages and
    tool calls with their outputs; not system/developer messages, reasoning, compaction or
    hosted-tool items."""
    if item_kind(item) == "message":
        return item.get("role") in _KEPT_ROLES
    return item.get("type") in KEPT_ITEM_TYPES


def strip_encrypted(value: Any) -> Any:
    """``value`` without any ``encrypted_content`` key, at any depth."""
    if isinstance(value, dict):
        return {k: strip_encrypted(v) for k, v in value.items() if k != "encrypted_content"}
    if isinstance(value, list):
        return [strip_encrypted(v) for v in value]
    return value


def filter_items(items: list[Item]) -> list[Item]:
    """The items a rollout keeps (``keep_item``), never with ``encrypted_content``."""
    return [strip_encrypted(item) for item in items if isinstance(item, dict) and keep_item(item)]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: ``terminal_metadata.error_origin`` of a run stopped by the model server or the settings
#: (see ``memory.state.classify``), not by anything in the task
INFRASTRUCTURE = "infrastructure"
#: what memory says of such an error instead of its text (a key, a URL, a status line are no
#: learning about the workspace)
INFRASTRUCTURE_TEXT = "model-server or settings error, not part of the task"


def records_work(outcome: RunOutcome) -> bool:
    """Whether a run is worth recording for memory: it completed, or it produced model output
    (items or a final output) before it failed or was cancelled. A run that never got a model
    reply (HTTP 401/404/5xx, a timeout, a cancel before the first reply) records nothing."""
    if outcome.terminal_state == "completed" or outcome.has_final_output:
        return True
    return bool(filter_items(outcome.new_items))


def exception_text(meta: dict[str, Any]) -> str:
    """The error a segment's ``terminal_metadata`` records, as memory may show it: ``Type:
    message``, or ``INFRASTRUCTURE_TEXT`` for a model-server or configuration error (also for
    segments recorded before ``error_origin`` existed: a ``ModelRequestError``); "" when the
    run raised nothing."""
    exc_type, message = meta.get("exception_type"), meta.get("exception_message")
    if not exc_type and not message:
        return ""
    if meta.get("error_origin") == INFRASTRUCTURE or exc_type == "ModelRequestError":
        return INFRASTRUCTURE_TEXT
    return f"{exc_type or 'Error'}: {message or ''}".strip()


#: ``segment(final_output=NO_OUTPUT)``: the run produced no final output (the key is left out)
NO_OUTPUT: Any = object()


def segment(
    rollout_id: str,
    *,
    input: list[Item],
    generated_items: list[Item],
    terminal_state: str,
    exception_type: str | None = None,
    exception_message: str | None = None,
    final_output: Any = NO_OUTPUT,
    conversation_key: str | None = None,
    source: dict[str, Any] | None = None,
    error_origin: str | None = None,
    updated_at: str | None = None,
) -> dict[str, Any]:
    """One run segment as recorded in ``<sessions_dir>/<rollout-id>.jsonl``: the one writer of
    the format ``parse_segment`` reads (a run's, an ingested turn's, a note's). ``final_output``
    is left out when not given (``NO_OUTPUT``); ``error_origin`` is kept only beside an
    exception."""
    data: dict[str, Any] = {"updated_at": updated_at or utc_now(), "rollout_id": rollout_id}
    if conversation_key is not None:
        data["conversation_key"] = conversation_key
    data["input"] = input
    data["generated_items"] = generated_items
    has_final_output = final_output is not NO_OUTPUT
    if has_final_output:
        data["final_output"] = final_output
    data["terminal_metadata"] = {
        "terminal_state": terminal_state,
        "exception_type": exception_type,
        "exception_message": exception_message,
        "has_final_output": has_final_output,
    }
    if error_origin is not None and (exception_type or exception_message):
        data["terminal_metadata"]["error_origin"] = error_origin
    if source is not None:
        data["source"] = dict(source)
    return data


def build_segment(
    ctx: SandboxRunContext,
    outcome: RunOutcome,
    rollout_id: str,
    conversation_key: str | None,
    *,
    updated_at: str | None = None,
    error_origin: str | None = None,
) -> dict[str, Any]:
    """A run's segment; ``error_origin`` is ``INFRASTRUCTURE`` when a model-server or settings
    error stopped the run (the caller classifies it: ``memory.state.classify``)."""
    exc = outcome.exception
    return segment(
        rollout_id,
        updated_at=updated_at,
        conversation_key=conversation_key,
        input=filter_items(ctx.input),
        generated_items=filter_items(outcome.new_items),
        final_output=jsonable(outcome.final_output) if outcome.has_final_output else NO_OUTPUT,
        terminal_state=outcome.terminal_state,
        exception_type=type(exc).__name__ if exc is not None else None,
        exception_message=str(exc) if exc is not None else None,
        error_origin=error_origin if exc is not None else None,
    )


def note_segment(
    rollout_id: str,
    text: str,
    *,
    kind: str,
    source: dict[str, str],
    updated_at: str | None = None,
) -> dict[str, Any]:
    """A segment that records a note given from outside a run (the MCP server's
    ``memory_remember``): the note is the user message; who gave it (``via``, ``client``,
    ``session``...) is kept in the segment's ``source`` only, not in the text phase one reads,
    so a client's name or session id never becomes part of what is remembered."""
    message = f"{text.strip()}\n\n(A {kind} to remember.)"
    return segment(
        rollout_id,
        updated_at=updated_at,
        source=source,
        input=[{"type": "message", "role": "user", "content": message}],
        generated_items=[],
        terminal_state="completed",
    )


_NOTE_TAIL = re.compile(r"\n\n\(A (preference|fact|procedure|note) to remember\.\)\s*\Z")


def read_note(message: str) -> tuple[str, str] | None:
    """``(kind, text)`` of a user message :func:`note_segment` wrote, or ``None`` for any
    other message: the one reader of the note's kind marker."""
    found = _NOTE_TAIL.search(message)
    if found is None:
        return None
    return found.group(1), message[: found.start()].strip()


_MAX_DEPTH = 64


def jsonable(value: Any, _depth: int = 0) -> Any:
    """``value`` as plain JSON data (dicts, lists, strings, numbers, booleans, None), so that
    redaction sees every string in it before it is written: pydantic models, dataclasses,
    attrs classes and plain objects (their public attributes) are converted; anything else
    becomes its ``str``. Cycles and very deep values end in ``str`` too."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if _depth >= _MAX_DEPTH:
        return str(value)
    deeper = _depth + 1
    if isinstance(value, dict):
        return {str(k): jsonable(v, deeper) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, deeper) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, BaseModel):
        return jsonable(value.model_dump(mode="json"), deeper)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return jsonable(fields, deeper)
    attrs_fields = getattr(type(value), "__attrs_attrs__", None)
    if attrs_fields is not None:
        return jsonable({a.name: getattr(value, a.name) for a in attrs_fields}, deeper)
    public = getattr(value, "__dict__", None)
    if isinstance(public, dict) and not isinstance(value, type):
        return jsonable({k: v for k, v in public.items() if not k.startswith("_")}, deeper)
    return str(value)


def segment_line(segment: dict[str, Any]) -> bytes:
    """The JSONL line of a segment (non-JSON values are stringified, never dropped)."""
    text = json.dumps(segment, ensure_ascii=False, default=str)
    return (safe_text(text) + "\n").encode("utf-8")


# ---------------------------------------------------------------- reading segments back
# The one parser of the segment format ``segment`` writes: rendering for phase one, the
# pending scan's fingerprint, the conversation list and the CLI's history all read through it.

_SEGMENT_KEYS = ("input", "generated_items", "terminal_metadata")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


@dataclasses.dataclass(frozen=True)
class RolloutSegment:
    """One run segment: one JSON line of a rollout file."""

    line_number: int
    updated_at: str | None
    rollout_id: str | None
    conversation_key: str | None
    input: list[Item]
    generated_items: list[Item]
    final_output: Any
    interruptions: list[Any]
    terminal_metadata: dict[str, Any]
    #: where an ingested segment came from (``sandmem memory ingest``): format, session id,
    #: working directory, and how far into the source it reaches; empty for a native run
    source: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def terminal_state(self) -> str:
        return str(self.terminal_metadata.get("terminal_state") or "unknown")


@dataclasses.dataclass(frozen=True)
class ParsedRollout:
    """The segments of a rollout file in file order, and how many lines could not be read."""

    segments: tuple[RolloutSegment, ...]
    malformed_lines: int = 0
    raw_bytes: int = 0

    @property
    def rollout_id(self) -> str | None:
        return next((s.rollout_id for s in self.segments if s.rollout_id), None)


def parse_rollout(text: str) -> ParsedRollout:
    """Parse a rollout file's text. Blank lines are ignored; a line that is not a JSON object
    with at least one of ``input``, ``generated_items``, ``terminal_metadata`` (a torn write, a
    stray edit) is skipped and counted in ``malformed_lines``."""
    segments: list[RolloutSegment] = []
    malformed = 0
    # split on "\n" only: JSON text may legally hold raw U+2028 and friends inside strings
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        segment = _parse_segment(line, number)
        if segment is None:
            malformed += 1
        else:
            segments.append(segment)
    return ParsedRollout(tuple(segments), malformed, len(text.encode("utf-8", "replace")))


def _parse_segment(line: str, number: int) -> RolloutSegment | None:
    try:
        data = loads_bounded(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or not any(key in data for key in _SEGMENT_KEYS):
        return None
    if _SURROGATE_ESCAPE.search(line):  # a lone surrogate would break UTF-8 encoding later
        data = json.loads(json.dumps(data, ensure_ascii=False).encode("utf-8", "replace"))
    meta = data.get("terminal_metadata")
    interruptions = data.get("interruptions")
    source = data.get("source")
    return RolloutSegment(
        line_number=number,
        updated_at=_opt_str(data.get("updated_at")),
        rollout_id=_opt_str(data.get("rollout_id")),
        conversation_key=_opt_str(data.get("conversation_key")),
        input=_item_list(data.get("input")),
        generated_items=_item_list(data.get("generated_items")),
        final_output=data.get("final_output"),
        interruptions=list(interruptions) if isinstance(interruptions, list) else [],
        terminal_metadata=dict(meta) if isinstance(meta, dict) else {},
        source=dict(source) if isinstance(source, dict) else {},
    )


def _item_list(value: Any) -> list[Item]:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if isinstance(value, list):
        return [dict(item) for item in value if isinstance(item, dict)]
    return []


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def parse_segment(line: str | bytes, number: int = 1) -> RolloutSegment | None:
    """One rollout line as a segment, or ``None`` when it is not one."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    return _parse_segment(text, number)


def segment_items(segment: RolloutSegment) -> list[Item]:
    """The conversation a segment holds: its input, then the items the run generated."""
    return [*segment.input, *segment.generated_items]


def rollout_items(text: str) -> list[Item]:
    """The conversation a rollout file's text holds: each segment's input, then the items its
    run generated, in file order (lines that are not segments are skipped)."""
    return [item for segment in parse_rollout(text).segments for item in segment_items(segment)]
