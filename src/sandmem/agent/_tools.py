"""Function tools: typed Python functions the model can call.

A tool's JSON schema is built once, when the tool is made (``FunctionTool.spec()`` returns the
same ``ToolSpec`` every turn). A function whose first parameter is typed
``RunContextWrapper[...]`` (or ``ToolContext[...]``) receives the run's context there; that
parameter is not part of the schema.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import math
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from sandmem._docstrings import parse_docstring
from sandmem._errors import ToolTimeoutError, UserError
from sandmem.agent._context import RunContextWrapper, ToolContext
from sandmem.agent._tool_output import ToolOutput as ToolOutput
from sandmem.agent._tool_output import to_tool_output as to_tool_output
from sandmem.models._base import ToolSpec

if TYPE_CHECKING:
    from sandmem.agent._agent import Agent

#: ``failure_error_function(ctx, error) -> text for the model`` (may be async)
ToolErrorFunction = Callable[[RunContextWrapper[Any], Exception], Any]
#: ``is_enabled(ctx, agent) -> bool`` (may be async)
EnabledFunction = Callable[[RunContextWrapper[Any], "Agent"], Any]
#: what a tool call past its ``timeout`` gives: a tool output for the model, or an error
TimeoutBehavior = Literal["error_as_result", "raise_exception"]


def default_tool_error_function(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """sandmem's default text for a failed tool call: the error's type and message, so the
    model can correct itself."""
    return f"Error: {type(error).__name__}: {error}"


@dataclass
class FunctionTool:
    """A tool: its schema for the model and ``on_invoke_tool(ctx, arguments_json) -> output``.

    ``on_invoke_tool`` may raise: the runner then asks ``failure_error_function`` for the text
    the model sees (``None``: the error fails the run). ``strict_json_schema`` sends the schema
    in the API's strict mode. ``is_enabled`` (a bool, or ``(ctx, agent) -> bool``) hides the tool
    from the model for a run. ``timeout_seconds`` bounds one call (async tools only): past it
    the call is cancelled and the model gets ``timeout_error_function(ctx, ToolTimeoutError)``'s
    text (default: ``Tool 'name' timed out after N seconds.``), or, with
    ``timeout_behavior="raise_exception"``, the run fails with ``ToolTimeoutError``.
    """

    name: str
    description: str
    params_json_schema: dict[str, Any]
    on_invoke_tool: Callable[[ToolContext[Any], str], Awaitable[Any]]
    strict_json_schema: bool = True
    is_enabled: bool | EnabledFunction = True
    failure_error_function: ToolErrorFunction | None = field(default=default_tool_error_function)
    timeout_seconds: float | None = None
    timeout_behavior: TimeoutBehavior = "error_as_result"
    timeout_error_function: ToolErrorFunction | None = None

    def __post_init__(self) -> None:
        timeout = self.timeout_seconds
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, int | float):
                raise TypeError(
                    "FunctionTool timeout_seconds must be a positive number in seconds or None."
                )
            if not math.isfinite(timeout) or timeout <= 0:
                raise ValueError("FunctionTool timeout_seconds must be a finite number above 0.")
            self.timeout_seconds = float(timeout)
        if self.timeout_behavior not in ("error_as_result", "raise_exception"):
            raise ValueError(
                "FunctionTool timeout_behavior must be one of: error_as_result, raise_exception"
            )

    async def invoke(self, ctx: ToolContext[Any], arguments: str) -> Any:
        """One call of the tool, bounded by ``timeout_seconds`` (the run loop calls this)."""
        if self.timeout_seconds is None:
            return await self.on_invoke_tool(ctx, arguments)
        try:
            return await asyncio.wait_for(
                self.on_invoke_tool(ctx, arguments), timeout=self.timeout_seconds
            )
        except TimeoutError as exc:
            error = ToolTimeoutError(self.name, self.timeout_seconds)
            if self.timeout_behavior == "raise_exception":
                raise error from exc
            if self.timeout_error_function is None:
                return str(error)
            value = self.timeout_error_function(ctx, error)
            return await value if inspect.isawaitable(value) else value

    @cached_property
    def _spec(self) -> ToolSpec:
        return ToolSpec(
            self.name, self.description, self.params_json_schema, self.strict_json_schema
        )

    def spec(self) -> ToolSpec:
        """The tool as the model sees it (built once)."""
        return self._spec

    async def on_invoke(self, arguments: str, context: Any = None) -> Any:
        """Call the tool outside a run (tests, scripts): ``context`` is wrapped for it; the
        result is the text (or content parts) the model would see."""
        ctx: ToolContext[Any] = ToolContext(context, tool_name=self.name, tool_arguments=arguments)
        return to_tool_output(await self.on_invoke_tool(ctx, arguments))

    async def enabled_for(self, ctx: RunContextWrapper[Any], agent: Agent) -> bool:
        if isinstance(self.is_enabled, bool):
            return self.is_enabled
        value = self.is_enabled(ctx, agent)
        if inspect.isawaitable(value):
            value = await value
        return bool(value)


class ToolArgumentsError(ValueError):
    """The model's tool arguments were not valid JSON or failed validation."""


def _takes_context(annotation: Any) -> bool:
    origin = typing.get_origin(annotation) or annotation
    return isinstance(origin, type) and issubclass(origin, RunContextWrapper)


def _params_model(
    fn: Callable[..., Any], descriptions: dict[str, str]
) -> tuple[type[BaseModel], bool]:
    """The pydantic model of ``fn``'s arguments, and whether ``fn`` takes the context first."""
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    takes_context = False
    for index, (name, param) in enumerate(inspect.signature(fn).parameters.items()):
        annotation = hints.get(name, Any)
        if index == 0 and _takes_context(annotation):
            takes_context = True
            continue
        if _takes_context(annotation):
            raise UserError(
                f"function_tool {fn.__name__}: a RunContextWrapper parameter must come first"
            )
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UserError(f"function_tool {fn.__name__}: *args/**kwargs are not supported")
        default = ... if param.default is param.empty else param.default
        if name in descriptions:
            fields[name] = (annotation, Field(default, description=descriptions[name]))
        else:
            fields[name] = (annotation, default)
    config = ConfigDict(extra="forbid")
    return create_model(f"{fn.__name__}_args", __config__=config, **fields), takes_context


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


def _schema(params: type[BaseModel], strict: bool, fn_name: str) -> dict[str, Any]:
    schema = params.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    if not strict:
        return schema
    from sandmem.agent._schema import strict_json_schema

    try:
        return strict_json_schema(schema)
    except UserError as exc:
        raise UserError(
            f"function_tool {fn_name}: its arguments cannot be expressed in strict mode ({exc}); "
            "pass strict_mode=False"
        ) from exc


@dataclass(frozen=True)
class _ToolOptions:
    name: str | None = None
    description: str | None = None
    use_docstring_info: bool = True
    failure_error_function: ToolErrorFunction | None = default_tool_error_function
    strict_mode: bool = True
    is_enabled: bool | EnabledFunction = True
    timeout: float | None = None
    timeout_behavior: TimeoutBehavior = "error_as_result"
    timeout_error_function: ToolErrorFunction | None = None


@dataclass(frozen=True)
class _Shape:
    """What a function's signature and docstring make of a tool (pure, so it can be reused)."""

    params: type[BaseModel]
    takes_context: bool
    schema: dict[str, Any]
    description: str


#: shapes already built, by everything they depend on: a closure made anew for every run (the
#: memory tools of each consolidation, bound to its workspace) costs its pydantic model and
#: schema once per process, not once per run. A bounded memo of pure values, not a registry.
_SHAPES: dict[tuple[Any, ...], _Shape] = {}
_SHAPES_MAX = 512


def _shape_key(fn: Callable[..., Any], options: _ToolOptions) -> tuple[Any, ...] | None:
    try:
        key = (
            fn.__code__,
            id(fn.__globals__),  # get_type_hints resolves names there
            fn.__doc__,
            fn.__defaults__,
            tuple(sorted((fn.__kwdefaults__ or {}).items())),
            tuple(fn.__annotations__.items()),
            options.strict_mode,
            options.use_docstring_info,
        )
        hash(key)
    except (AttributeError, TypeError):  # not a plain function, or an unhashable default
        return None
    return key


def _shape(fn: Callable[..., Any], options: _ToolOptions) -> _Shape:
    key = _shape_key(fn, options)
    if key is not None and key in _SHAPES:
        return _SHAPES[key]
    doc = parse_docstring(fn.__doc__) if options.use_docstring_info else None
    params, takes_context = _params_model(fn, doc.params if doc else {})
    schema = _schema(params, options.strict_mode, fn.__name__)
    shape = _Shape(params, takes_context, schema, doc.description if doc else "")
    if key is not None and len(_SHAPES) < _SHAPES_MAX:
        _SHAPES[key] = shape
    return shape


def _make_tool(fn: Callable[..., Any], options: _ToolOptions) -> FunctionTool:
    shape = _shape(fn, options)
    params, takes_context = shape.params, shape.takes_context
    is_async = inspect.iscoroutinefunction(fn)
    if options.timeout is not None and not is_async:
        raise ValueError(
            f"function_tool {fn.__name__}: timeout is only supported for async functions (a "
            "plain function cannot be interrupted)"
        )

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> Any:
        # the function's own value: ``tool_use_behavior`` sees it, the model sees its text
        kwargs = parse_arguments(params, arguments)
        args = (ctx,) if takes_context else ()
        return await fn(*args, **kwargs) if is_async else fn(*args, **kwargs)

    return FunctionTool(
        name=options.name or fn.__name__,
        description=options.description or shape.description,
        params_json_schema=copy.deepcopy(shape.schema),
        on_invoke_tool=on_invoke_tool,
        strict_json_schema=options.strict_mode,
        is_enabled=options.is_enabled,
        failure_error_function=options.failure_error_function,
        timeout_seconds=options.timeout,
        timeout_behavior=options.timeout_behavior,
        timeout_error_function=options.timeout_error_function,
    )


def _check_unsupported(needs_approval: Any, docstring_style: Any) -> None:
    if needs_approval:
        raise UserError(
            "function_tool(needs_approval=...): human-in-the-loop approval is not supported by "
            "sandmem (see docs/porting.md); leave needs_approval unset"
        )
    if docstring_style not in (None, "google", "numpy", "sphinx"):
        raise ValueError("docstring_style must be 'google', 'numpy', 'sphinx' or None")


@overload
def function_tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def function_tool(
    *,
    name_override: str | None = None,
    description_override: str | None = None,
    use_docstring_info: bool = True,
    failure_error_function: ToolErrorFunction | None = default_tool_error_function,
    strict_mode: bool = True,
    is_enabled: bool | EnabledFunction = True,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    timeout_behavior: TimeoutBehavior = "error_as_result",
    timeout_error_function: ToolErrorFunction | None = None,
    docstring_style: str | None = None,
    needs_approval: bool = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def function_tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name_override: str | None = None,
    description_override: str | None = None,
    use_docstring_info: bool = True,
    failure_error_function: ToolErrorFunction | None = default_tool_error_function,
    strict_mode: bool = True,
    is_enabled: bool | EnabledFunction = True,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    timeout_behavior: TimeoutBehavior = "error_as_result",
    timeout_error_function: ToolErrorFunction | None = None,
    docstring_style: str | None = None,
    needs_approval: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a typed function (sync or async) into a ``FunctionTool``.

    The JSON schema comes from the type hints (via pydantic), in strict mode unless
    ``strict_mode=False``. With ``use_docstring_info`` (the default) the description and each
    argument's description come from the docstring (Google, NumPy or Sphinx style).
    ``name_override`` / ``description_override`` (aliases ``name`` / ``description``) replace
    them. A tool that raises gives the model ``failure_error_function(ctx, error)``'s text
    (``None``: the error fails the run). ``timeout`` (seconds, async functions only) bounds
    each call; see ``FunctionTool`` for ``timeout_behavior`` and ``timeout_error_function``.
    The docstring style is detected (``docstring_style`` is accepted for the reference's sake).
    Use bare (``@function_tool``) or with options; ``tool`` is the same decorator.
    """
    _check_unsupported(needs_approval, docstring_style)
    options = _ToolOptions(
        name=name_override or name,
        description=description_override or description,
        use_docstring_info=use_docstring_info,
        failure_error_function=failure_error_function,
        strict_mode=strict_mode,
        is_enabled=is_enabled,
        timeout=timeout,
        timeout_behavior=timeout_behavior,
        timeout_error_function=timeout_error_function,
    )
    if fn is not None:
        return _make_tool(fn, options)

    def decorate(inner: Callable[..., Any]) -> FunctionTool:
        return _make_tool(inner, options)

    return decorate


#: the reference's newer name for ``function_tool``
tool = function_tool
