"""Transcript items: plain dicts in the OpenAI Responses API item format.

This is the canonical format inside sandmem; model adapters convert to and from it.

- message: ``{"type": "message", "role": "user" | "assistant" | "system" | "developer",
  "content": str | list[part]}`` (``type`` may be omitted on input)
- tool call: ``{"type": "function_call", "call_id", "name", "arguments"}``
- tool output: ``{"type": "function_call_output", "call_id", "output"}`` where output is a
  string or a list of content parts (``input_text`` / ``input_image``)
- reasoning: ``{"type": "reasoning", ...}``
"""

from __future__ import annotations

from typing import Any

Item = dict[str, Any]


def user_message(text: str) -> Item:
    return {"type": "message", "role": "user", "content": text}


def assistant_message(text: str) -> Item:
    return {"type": "message", "role": "assistant", "content": text}


def item_kind(item: Item) -> str:
    """``message`` for messages (with or without ``type``), otherwise the item's ``type``."""
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind)


def message_text(item: Item) -> str:
    """The text of a message item, joining text parts; empty for other items."""
    if item_kind(item) != "message":
        return ""
    return content_text(item.get("content"))


def content_texts(content: Any) -> list[str]:
    """The text parts of a message's ``content`` (a string, or a list of parts with ``text``):
    the one helper that pulls text out of a message."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
        return texts
    return []


def content_text(content: Any, *, sep: str = "") -> str:
    """``content_texts`` joined with ``sep``."""
    return sep.join(content_texts(content))


def input_message(text: str) -> Item:
    """A run's string input as an item: ``{"content": text, "role": "user"}``, the reference
    SDK's shape (no ``type``), so sessions, memory segments and ``to_input_list()`` hold what
    a program written for it expects."""
    return {"content": text, "role": "user"}


def normalize_input(value: str | list[Item]) -> list[Item]:
    """A run's input as a list of items (a string becomes one user message)."""
    if isinstance(value, str):
        return [input_message(value)]
    return [dict(item) for item in value]
