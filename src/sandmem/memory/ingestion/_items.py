"""OpenAI Responses items (``to_input_list()``, a ``SQLiteSession``'s rows) and Chat
Completions messages as canonical items. Pure: ``(position, time, value)`` in, events out."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from sandmem._items import content_text
from sandmem.memory.ingestion._model import (
    Event,
    SourceMeta,
    bound_value,
    call_output,
    message,
    tool_call,
)
from sandmem.memory.rollouts import KEPT_ITEM_TYPES, strip_encrypted

Element = tuple[int, str | None, Any]

#: item types of the Responses format (beyond messages) that mark a list as Responses items
RESPONSES_TYPES = KEPT_ITEM_TYPES | {"reasoning", "message", "compaction", "item_reference"}


def item_events(elements: Iterable[Element], meta: SourceMeta) -> Iterator[Event]:
    """Events of a list of items, each read by its own shape: Responses items (messages, tool
    calls and their outputs as they are; system and developer messages and reasoning dropped
    and counted) and Chat Completions messages (``assistant`` messages with ``tool_calls``
    become a message and function calls, ``tool`` messages function call outputs). One file
    may hold both: a plain user/assistant list gains a tool call in either shape."""
    for pos, time, value in elements:
        if not isinstance(value, dict):
            meta.drop("malformed_item")
            continue
        events = _chat(value, meta) if chat_shaped(value) else _responses_item(value, meta)
        for event in events:
            event.pos, event.time = pos, time
            yield event


def _responses_item(value: dict[str, Any], meta: SourceMeta) -> list[Event]:
    kind = value.get("type", "message" if "role" in value else None)
    if kind == "message":
        event = _message(value, meta)
        return [event] if event is not None else []
    if kind in KEPT_ITEM_TYPES:
        return [Event(0, bound_value(strip_encrypted(value)))]
    meta.drop("reasoning" if kind == "reasoning" else f"item:{kind}")
    return []


def chat_shaped(value: dict[str, Any]) -> bool:
    """Whether an item is a Chat Completions message that only that format has (a ``tool``
    or ``function`` message, an assistant message with ``tool_calls``)."""
    if "type" in value:
        return False
    return value.get("role") in ("tool", "function") or bool(
        {"tool_calls", "tool_call_id"} & set(value)
    )


def _message(value: dict[str, Any], meta: SourceMeta) -> Event | None:
    role = value.get("role")
    text = content_text(value.get("content"), sep="\n")
    if role not in ("user", "assistant"):
        meta.drop(f"{role}_message")
        return None
    if not text.strip():
        meta.drop("empty_message")
        return None
    return Event(0, message(str(role), text), turn=role == "user")


def _chat(value: dict[str, Any], meta: SourceMeta) -> list[Event]:
    role = value.get("role")
    if role == "tool":
        text = content_text(value.get("content"), sep="\n")
        return [Event(0, call_output(str(value.get("tool_call_id") or ""), text))]
    if role == "function":  # the older single-function form
        output = content_text(value.get("content"), sep="\n")
        return [Event(0, call_output(str(value.get("name") or ""), output))]
    events: list[Event] = []
    message_event = _message(value, meta) if role in ("user", "assistant") or role else None
    if message_event is not None:
        events.append(message_event)
    calls = value.get("tool_calls")
    if role == "assistant" and isinstance(calls, list):
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                meta.drop("malformed_tool_call")
                continue
            arguments = function.get("arguments")
            events.append(
                Event(
                    0,
                    tool_call(
                        str(call.get("id") or ""),
                        str(function.get("name") or ""),
                        arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
                    ),
                )
            )
    return events


def looks_like_items(values: list[Any]) -> bool:
    """Whether a list holds Responses items or chat messages at all."""
    known = 0
    for value in values:
        if not isinstance(value, dict):
            return False
        if value.get("type") in RESPONSES_TYPES or value.get("role") in (
            "user",
            "assistant",
            "system",
            "developer",
            "tool",
            "function",
        ):
            known += 1
    return known > 0 and known >= len(values) // 2
