"""Deterministic model doubles for tests and offline use. Never chosen silently: you pass them
to an agent or a config yourself.

``FunctionModel(fn)`` turns a callable into a model: ``fn`` receives the ``ModelRequest`` and
returns the model's output as a ``ModelResponse``, a list of items, or a string (one assistant
message); it may be async.

``InMemorySandboxClient(exec_handler=None)`` is the sandbox seam's double: sessions whose
workspace is a dict held by the client (nothing touches the host); ``exec`` calls
``exec_handler(argv, workdir, env)`` (returning an ``ExecResult`` or a string of stdout) or
answers exit code 127.
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from sandmem._items import Item, assistant_message
from sandmem._usage import Usage
from sandmem.models._base import Model, ModelRequest, ModelResponse
from sandmem.sandboxes._in_memory import InMemorySandboxClient as InMemorySandboxClient
from sandmem.sandboxes._in_memory import InMemorySandboxSession as InMemorySandboxSession

ModelFunction = Callable[
    [ModelRequest],
    ModelResponse | list[Item] | str | Awaitable[ModelResponse | list[Item] | str],
]

_call_ids = itertools.count(1)


def text(value: str) -> Item:
    """An assistant message item."""
    return assistant_message(value)


def tool_call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> Item:
    """A function-call item; ``arguments`` may be a dict (JSON-encoded here) or raw text."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "type": "function_call",
        "call_id": call_id or f"call_{next(_call_ids)}",
        "name": name,
        "arguments": args,
    }


class FunctionModel(Model):
    """A model whose every answer is computed by ``fn``. ``requests`` records each request;
    ``usage`` is reported per request (tokens estimated from sizes when not given)."""

    def __init__(self, fn: ModelFunction, *, name: str = "function-model") -> None:
        self._fn = fn
        self.name = name
        self.requests: list[ModelRequest] = []

    async def get_response(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        result = self._fn(request)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, ModelResponse):
            return result
        items = [text(result)] if isinstance(result, str) else list(result)
        usage = Usage(
            requests=1,
            input_tokens=len(json.dumps(request.input)) // 4,
            output_tokens=len(json.dumps(items)) // 4,
        )
        return ModelResponse(output=items, usage=usage)


def last_user_text(request: ModelRequest) -> str:
    """The text of the last user message in a request (empty when there is none)."""
    from sandmem._items import message_text

    for item in reversed(request.input):
        if item.get("role") == "user":
            return message_text(item)
    return ""


def tool_outputs(request: ModelRequest) -> list[Item]:
    """The function-call outputs in a request, oldest first."""
    return [i for i in request.input if i.get("type") == "function_call_output"]


__all__ = [
    "FunctionModel",
    "InMemorySandboxClient",
    "InMemorySandboxSession",
    "ModelFunction",
    "last_user_text",
    "text",
    "tool_call",
    "tool_outputs",
]
