"""Function tools: typed Python functions the model can call."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from sandmem.models._base import ToolSpec

#: what a tool returns to the model: text, or a list of content parts (e.g. an image)
ToolOutput = str | list[dict[str, Any]]


@dataclass(frozen=True)
class FunctionTool:
    """A tool: its schema for the model and ``on_invoke(arguments_json) -> output``.

    ``on_invoke`` may raise; the runner turns any exception into an error output that the
    model sees.
    """

    name: str
    description: str
    params_json_schema: dict[str, Any]
    on_invoke: Callable[[str], Awaitable[ToolOutput]]

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.params_json_schema)


class ToolArgumentsError(ValueError):
    """The model's tool arguments were not valid JSON or failed validation."""


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return inspect.cleandoc(doc).split("\n\n", 1)[0].replace("\n", " ").strip()


def _params_model(fn: Callable[..., Any]) -> type[BaseModel]:
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"function_tool {fn.__name__}: *args/**kwargs are not supported")
        annotation = hints.get(name, Any)
        default = ... if param.default is param.empty else param.default
        fields[name] = (annotation, default)
    config = ConfigDict(extra="forbid")
    return create_model(f"{fn.__name__}_args", __config__=config, **fields)


def parse_arguments(model: type[BaseModel], arguments: str) -> dict[str, Any]:
    """Validate a JSON argument string against ``model``; raises ``ToolArgumentsError``."""
    try:
        raw = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        raise ToolArgumentsError(f"arguments are not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ToolArgumentsError("arguments must be a JSON object")
    try:
        parsed = model.model_validate(raw)
    except ValidationError as exc:
        raise ToolArgumentsError(f"invalid arguments: {exc}") from exc
    return {name: getattr(parsed, name) for name in type(parsed).model_fields}


def _to_output(value: Any) -> ToolOutput:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if isinstance(value, list) and all(isinstance(v, dict) and "type" in v for v in value):
        return value
    try:
        return json.dumps(value)
    except TypeError:
        return str(value)


def _make_tool(fn: Callable[..., Any], name: str | None, description: str | None) -> FunctionTool:
    params = _params_model(fn)
    schema = params.model_json_schema()
    schema.pop("title", None)
    is_async = inspect.iscoroutinefunction(fn)

    async def on_invoke(arguments: str) -> ToolOutput:
        kwargs = parse_arguments(params, arguments)
        result = await fn(**kwargs) if is_async else fn(**kwargs)
        return _to_output(result)

    return FunctionTool(
        name=name or fn.__name__,
        description=description or _first_paragraph(fn.__doc__),
        params_json_schema=schema,
        on_invoke=on_invoke,
    )


@overload
def function_tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def function_tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def function_tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a typed function (sync or async) into a ``FunctionTool``.

    The JSON schema comes from the type hints (via pydantic); the description from the first
    paragraph of the docstring. Use bare (``@function_tool``) or with options
    (``@function_tool(name="x")``).
    """
    if fn is not None:
        return _make_tool(fn, name, description)

    def decorate(inner: Callable[..., Any]) -> FunctionTool:
        return _make_tool(inner, name, description)

    return decorate
