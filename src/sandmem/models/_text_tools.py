"""Tool calls a model wrote as text, turned into real tool calls.

Small local models often answer a request that offers tools with the call *written in the
answer* instead of the API's tool-call field, because their server's chat template does not
parse it. Seen forms, all handled here:

- a fenced block: ```` ```json {"name": "apply_patch", "arguments": {...}} ``` ````;
- Qwen / Hermes tags: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` (one or more;
  the last may be left unclosed);
- the whole answer as a bare object, or a list of them.

A call is ``{"name", "arguments"}`` (``"parameters"`` is taken for ``"arguments"``, and
``{"function": {...}}`` is unwrapped); ``arguments`` may be an object or a JSON string. A call
is recovered only when its name is a tool the request offered: anything else stays text (an
example in an explanation is not run). The rest of the answer's text stays a message.

``recover`` is pure; ``enabled`` decides whether a request gets it: ``ModelSettings.
text_tool_calls`` when set, else ``SANDMEM_TEXT_TOOL_CALLS``, else on for every server but
OpenAI's own (``api.openai.com``), whose tool calls always come in the API's field.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sandmem._errors import UserError
from sandmem._items import Item, content_text, item_kind

ENV_VAR = "SANDMEM_TEXT_TOOL_CALLS"
#: hosts whose tool calls always arrive in the API's own field
OPENAI_HOSTS = frozenset({"api.openai.com"})

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n(.*?)(?:\n[ \t]*```|\Z)", re.DOTALL)
_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def is_openai_server(base_url: object) -> bool:
    """Whether ``base_url`` is OpenAI's own API (``None``: the client's default, which is)."""
    if base_url is None:
        return True
    host = urlsplit(str(base_url)).hostname or ""
    return host.lower() in OPENAI_HOSTS


def enabled(setting: bool | None, base_url: object) -> bool:
    """Whether text tool calls are recovered for a request (see the module docstring)."""
    if setting is not None:
        return setting
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    if raw:
        raise UserError(f"{ENV_VAR} must be 1 or 0 (true/false), got {raw!r}")
    return not is_openai_server(base_url)


@dataclass(frozen=True)
class _Found:
    """A call found in the text, and the span of text it came from."""

    start: int
    end: int
    calls: list[tuple[str, str]]


def _as_call(value: Any, offered: frozenset[str]) -> tuple[str, str] | None:
    """``(name, arguments JSON)`` when ``value`` is a call to an offered tool."""
    if not isinstance(value, dict):
        return None
    inner = value.get("function")
    if isinstance(inner, dict) and "name" in inner:
        value = inner
    name = value.get("name")
    if not isinstance(name, str) or name not in offered:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        return name, arguments.strip() or "{}"
    if not isinstance(arguments, dict):
        return None
    return name, json.dumps(arguments, ensure_ascii=False)


def _calls_in(text: str, offered: frozenset[str]) -> list[tuple[str, str]] | None:
    """The calls ``text`` (JSON: an object or a list of objects) holds, when every one is a
    call to an offered tool; ``None`` otherwise."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    values = value if isinstance(value, list) else [value]
    calls = [_as_call(v, offered) for v in values]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _find(text: str, offered: frozenset[str]) -> list[_Found]:
    found: list[_Found] = []
    for pattern in (_TAG, _FENCE):
        for match in pattern.finditer(text):
            if any(f.start <= match.start() < f.end for f in found):
                continue  # a fence inside a tag (or the reverse) is one call
            body = match.group(match.lastindex or 0)
            calls = _calls_in(body.strip(), offered)
            if calls:
                found.append(_Found(match.start(), match.end(), calls))
    if not found:
        calls = _calls_in(text.strip(), offered)
        if calls:
            found.append(_Found(0, len(text), calls))
    return sorted(found, key=lambda f: f.start)


def recover(output: list[Item], offered: list[str]) -> list[Item]:
    """``output`` with tool calls written in its assistant text turned into ``function_call``
    items (see the module docstring). Unchanged when it already has a tool call, when no tool
    was offered, or when its text holds no call to an offered tool."""
    names = frozenset(offered)
    if not names or any(item_kind(i) == "function_call" for i in output):
        return output
    result: list[Item] = []
    recovered = False
    for item in output:
        if item_kind(item) != "message" or item.get("role") != "assistant":
            result.append(item)
            continue
        text = content_text(item.get("content"))
        found = _find(text, names)
        if not found:
            result.append(item)
            continue
        recovered = True
        rest, cursor = [], 0
        for f in found:
            rest.append(text[cursor : f.start])
            cursor = f.end
        rest.append(text[cursor:])
        left = "".join(rest).strip()
        if left:
            result.append({**item, "content": left})
        for f in found:
            for name, arguments in f.calls:
                result.append(
                    {
                        "type": "function_call",
                        "call_id": f"call_text_{uuid.uuid4().hex[:20]}",
                        "name": name,
                        "arguments": arguments,
                    }
                )
    return result if recovered else output
