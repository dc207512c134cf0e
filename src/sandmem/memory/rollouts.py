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
from sandmem._run_context import RunOutcome, SandboxRunContext

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


def file_safe_rollout_id(key: str) -> str:
    """Map any conversation key to a file-safe rollout id: a slug of it plus 8 hex of its
    SHA-256, so different keys never collide and the same key always maps the same way."""
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:8]
    slug = _SLUG_CHARS.sub("-", key.strip()).strip("-._")[:110] or "conversation"
    return f"{slug}-{digest}"


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
        try:
            return validate_rollout_id(candidate), None
        except ValueError:
            return file_safe_rollout_id(candidate), candidate
    return new_rollout_id(), None


def _session_id(ctx: SandboxRunContext) -> str | None:
    if ctx.session is None:
        return None
    value = getattr(ctx.session, "session_id", None)
    return value if isinstance(value, str) else None


def _keep(item: Item) -> bool:
    kind = item_kind(item)
    if kind == "reasoning":
        return False
    return not (kind == "message" and item.get("role") in ("system", "developer"))


def filter_items(items: list[Item]) -> list[Item]:
    """Drop system/developer messages and reasoning items; keep the rest."""
    return [item for item in items if _keep(item)]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build_segment(
    ctx: SandboxRunContext,
    outcome: RunOutcome,
    rollout_id: str,
    conversation_key: str | None,
    *,
    updated_at: str | None = None,
) -> dict[str, Any]:
    """One run segment as recorded in ``<sessions_dir>/<rollout-id>.jsonl``."""
    exc = outcome.exception
    segment: dict[str, Any] = {
        "updated_at": updated_at or utc_now(),
        "rollout_id": rollout_id,
    }
    if conversation_key is not None:
        segment["conversation_key"] = conversation_key
    segment["input"] = filter_items(ctx.input)
    segment["generated_items"] = filter_items(outcome.new_items)
    if outcome.has_final_output:
        segment["final_output"] = jsonable(outcome.final_output)
    segment["terminal_metadata"] = {
        "terminal_state": outcome.terminal_state,
        "exception_type": type(exc).__name__ if exc is not None else None,
        "exception_message": str(exc) if exc is not None else None,
        "has_final_output": outcome.has_final_output,
    }
    return segment


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
    return (json.dumps(segment, ensure_ascii=False, default=str) + "\n").encode("utf-8")
