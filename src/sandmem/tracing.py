"""OpenTelemetry tracing of runs, model requests, tool calls and memory generation.

sandmem emits spans through the OpenTelemetry API (``pip install 'sandmem[otel]'``); the
application chooses where they go by configuring an OpenTelemetry SDK ``TracerProvider`` (OTLP
to Jaeger, Tempo, Langfuse, Phoenix, Honeycomb...; the console; see ``docs/observability.md``).
Without the ``opentelemetry-api`` package every function here is a cheap no-op, and so is a run
with ``RunConfig(tracing_disabled=True)``. This module is the only one that imports
``opentelemetry``, and only when a span is first made.

The span tree::

    invoke_agent <agent>                      one per run (workflow name, trace/group ids)
    ├── chat <model>                          one per model request (GenAI conventions)
    └── execute_tool <tool>                   one per tool call (name, call id, error)
    sandmem.memory.flush                      one per memory generation of a layout
    ├── sandmem.memory.phase_one              one per rollout (id, outcome, tokens)
    │   └── chat <model>
    └── sandmem.memory.phase_two              selection sizes, outcome, tokens, turns
        └── invoke_agent memory-consolidation

Spans are made current while their work runs, so they nest through ``asyncio`` tasks (a task
copies the context it was created in): concurrent phase-one extractions are each a child of
their flush. Message contents are recorded only with ``RunConfig(
trace_include_sensitive_data=True)``, and then redacted (``sandmem.redaction``) first.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from sandmem._items import Item, item_kind
from sandmem.models._base import Model, ModelRequest, ModelResponse
from sandmem.redaction import Redactor, redact

if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "InstrumentedModel",
    "Span",
    "aspan",
    "current_span",
    "instrument_model",
    "is_available",
    "span",
    "start_span",
    "trace",
    "traced_call",
]

logger = logging.getLogger("sandmem.tracing")

INSTALL_HINT = "tracing needs the OpenTelemetry API: pip install 'sandmem[otel]'"
#: the instrumentation scope of every span sandmem makes
SCOPE = "sandmem"

AttributeValue = str | bool | int | float | list[str] | list[int] | list[float]


@functools.cache
def _otel() -> ModuleType | None:
    try:
        from opentelemetry import trace
    except ImportError:
        logger.debug(INSTALL_HINT)
        return None
    return trace


def is_available() -> bool:
    """Whether the OpenTelemetry API is installed (spans are then made)."""
    return _otel() is not None


def _clean(attributes: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """Attribute values OpenTelemetry accepts: ``None`` dropped, lists of one primitive type
    kept, anything else as its string. Every string is redacted here, the one place an
    attribute enters a span (ids, names, messages: any of them may be secret-shaped)."""
    out: dict[str, AttributeValue] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, str):
            out[key] = redact(value)
        elif isinstance(value, bool | int | float):
            out[key] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            out[key] = [redact(str(v)) for v in value]
        else:
            out[key] = redact(str(value))
    return out


class Span:
    """A handle on the current sandmem span; every method is a no-op when tracing is off."""

    def __init__(self, otel_span: Any = None) -> None:
        self._span = otel_span

    @property
    def recording(self) -> bool:
        return self._span is not None and bool(self._span.is_recording())

    def set(self, **attributes: Any) -> None:
        """Set attributes (``None`` values are skipped); dotted names via ``set_many``."""
        self.set_many(attributes)

    def set_many(self, attributes: Mapping[str, Any]) -> None:
        if self._span is not None:
            self._span.set_attributes(_clean(attributes))

    def end(self) -> None:
        if self._span is not None:
            self._span.end()

    def attach(self) -> object | None:
        """Make this span current in the running task's context; returns the token for
        ``detach`` (``None`` when tracing is off)."""
        if self._span is None:
            return None
        from opentelemetry import context, trace

        return context.attach(trace.set_span_in_context(self._span))

    @staticmethod
    def detach(token: object | None) -> None:
        if token is not None:
            from opentelemetry import context

            context.detach(token)  # type: ignore[arg-type]

    def fail(self, error_type: str, message: str | None = None) -> None:
        """Mark the span as failed without an exception reaching it (e.g. a tool error the
        model is shown, a rollout whose extraction is retried later)."""
        trace = _otel()
        if self._span is None or trace is None:
            return
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(trace.Status(trace.StatusCode.ERROR, message and redact(message)))


def start_span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    parent: Span | None = None,
    client: bool = False,
    enabled: bool = True,
) -> Span:
    """A span that is *not* made current: the caller ends it (``Span.end``). Its parent is
    ``parent`` when given, else the current span. For work whose start and end are separate
    events (a run's model call, seen by a run listener)."""
    trace = _otel() if enabled else None
    if trace is None:
        return Span()
    kind = trace.SpanKind.CLIENT if client else trace.SpanKind.INTERNAL
    context = None
    if parent is not None and parent._span is not None:
        context = trace.set_span_in_context(parent._span)
    otel_span = trace.get_tracer(SCOPE).start_span(
        name, context=context, kind=kind, attributes=_clean(attributes or {})
    )
    return Span(otel_span)


@contextlib.contextmanager
def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    enabled: bool = True,
    client: bool = False,
) -> Iterator[Span]:
    """A span named ``name``, current while the block runs (children nest under it, also in
    tasks created inside it). An exception leaving the block is recorded (its message
    redacted), sets ``error.type`` and the error status, and propagates."""
    trace = _otel() if enabled else None
    if trace is None:
        yield Span()
        return
    kind = trace.SpanKind.CLIENT if client else trace.SpanKind.INTERNAL
    tracer = trace.get_tracer(SCOPE)
    with tracer.start_as_current_span(
        name,
        kind=kind,
        attributes=_clean(attributes or {}),
        record_exception=False,
        set_status_on_exception=False,
    ) as otel_span:
        handle = Span(otel_span)
        try:
            yield handle
        except BaseException as exc:
            handle.fail(type(exc).__name__, str(exc))
            otel_span.add_event(
                "exception",
                {"exception.type": type(exc).__name__, "exception.message": redact(str(exc))},
            )
            raise


@contextlib.contextmanager
def trace(
    workflow_name: str,
    trace_id: str | None = None,
    group_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    disabled: bool = False,
) -> Iterator[Span]:
    """The reference's ``with trace("My workflow"):``, grouping the runs inside it: a span
    named after the workflow (runs started inside nest under it), a no-op without
    OpenTelemetry or with ``disabled``."""
    attributes: dict[str, Any] = {"sandmem.workflow_name": workflow_name}
    if trace_id:
        attributes["sandmem.trace_id"] = trace_id
    if group_id:
        attributes["sandmem.group_id"] = group_id
    for key, value in (metadata or {}).items():
        attributes[f"sandmem.metadata.{key}"] = str(value)
    with span(workflow_name, attributes, enabled=not disabled) as handle:
        yield handle


@contextlib.asynccontextmanager
async def aspan(
    name: str, attributes: Mapping[str, Any] | None = None, *, enabled: bool = True
) -> AsyncIterator[Span]:
    """``span`` as an async context manager, to share one ``async with`` line with a lock or
    a semaphore (``async with semaphore, tracing.aspan(...) as current:``)."""
    with span(name, attributes, enabled=enabled) as current:
        yield current


def current_span() -> Span:
    """The span current in this task (a no-op handle when tracing is off or none is)."""
    trace = _otel()
    if trace is None:
        return Span()
    return Span(trace.get_current_span())


async def traced_call(
    name: str,
    attributes: Mapping[str, Any],
    call: Callable[[], Awaitable[Any]],
    *,
    enabled: bool = True,
) -> Any:
    """Await ``call()`` inside a span (for code that wants one line)."""
    with span(name, attributes, enabled=enabled):
        return await call()


# ---------------------------------------------------------------- model requests


def _system(model: Model) -> str:
    """``gen_ai.system``: ``openai`` for sandmem's OpenAI models, else the model's package
    (a wrapper such as ``InstrumentedModel`` is looked through)."""
    from sandmem.models._openai_common import OpenAIModelBase

    for _ in range(8):
        inner = getattr(model, "wrapped", None) or getattr(model, "inner", None)
        if not isinstance(inner, Model):
            break
        model = inner
    if isinstance(model, OpenAIModelBase):
        return "openai"
    return type(model).__module__.split(".", 1)[0]


def _finish_reasons(response: ModelResponse) -> list[str]:
    given = getattr(response, "finish_reasons", None)
    if isinstance(given, list) and given:
        return [str(r) for r in given]
    if any(item_kind(item) == "function_call" for item in response.output):
        return ["tool_calls"]
    return ["stop"]


def _json(value: Any) -> str:
    """``value`` as JSON, its string values redacted *before* it is serialized (and the text
    again in ``_clean``)."""
    return json.dumps(Redactor().redact_obj(value), ensure_ascii=False, default=str)


def request_attributes(model: Model, request: ModelRequest, sensitive: bool) -> dict[str, Any]:
    settings = request.settings
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": _system(model),
        "gen_ai.provider.name": _system(model),
        "gen_ai.request.model": model.name,
        "gen_ai.request.temperature": settings.temperature,
        "gen_ai.request.max_tokens": settings.max_tokens,
        "gen_ai.output.type": "json" if request.output_schema is not None else "text",
        "sandmem.request.tools": [tool.name for tool in request.tools],
    }
    if sensitive:
        attributes["gen_ai.system_instructions"] = redact(request.instructions or "")
        attributes["gen_ai.input.messages"] = _json(request.input)
    return attributes


def response_attributes(model: Model, response: ModelResponse, sensitive: bool) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.response.model": getattr(response, "model", None) or model.name,
        "gen_ai.response.id": response.response_id,
        "gen_ai.response.finish_reasons": _finish_reasons(response),
        "gen_ai.usage.input_tokens": response.usage.input_tokens,
        "gen_ai.usage.output_tokens": response.usage.output_tokens,
    }
    if sensitive:
        attributes["gen_ai.output.messages"] = _json(response.output)
    return attributes


class InstrumentedModel(Model):
    """A ``Model`` that makes one GenAI span per request around ``wrapped``."""

    def __init__(self, wrapped: Model, *, include_sensitive_data: bool = False) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name
        self.include_sensitive_data = include_sensitive_data

    def _span(self, request: ModelRequest) -> contextlib.AbstractContextManager[Span]:
        attributes = request_attributes(self.wrapped, request, self.include_sensitive_data)
        return span(f"chat {self.name}", attributes, client=True)

    async def get_response(self, request: ModelRequest) -> ModelResponse:
        with self._span(request) as current:
            response = await self.wrapped.get_response(request)
            current.set_many(
                response_attributes(self.wrapped, response, self.include_sensitive_data)
            )
            return response

    async def stream_response(self, request: ModelRequest) -> AsyncIterator[Any]:
        """The wrapped model's stream, inside the request's span."""
        stream: Any = getattr(self.wrapped, "stream_response", None)
        if stream is None:  # a Model without streaming: one response
            yield await self.get_response(request)
            return
        with self._span(request) as current:
            async for event in stream(request):
                if isinstance(event, ModelResponse):
                    current.set_many(
                        response_attributes(self.wrapped, event, self.include_sensitive_data)
                    )
                yield event


def instrument_model(
    model: Model, *, enabled: bool = True, include_sensitive_data: bool = False
) -> Model:
    """``model`` with one span per request; ``model`` itself when tracing is off or it is
    instrumented already."""
    if not enabled or not is_available() or isinstance(model, InstrumentedModel):
        return model
    return InstrumentedModel(model, include_sensitive_data=include_sensitive_data)


# ---------------------------------------------------------------- tool calls


def tool_attributes(name: str, call: Item, sensitive: bool) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call.get("call_id"),
        "gen_ai.tool.type": "function",
    }
    if sensitive:
        attributes["gen_ai.tool.call.arguments"] = redact(str(call.get("arguments") or ""))
    return attributes


def tool_result(current: Span, output: Any, sensitive: bool) -> None:
    """Record a tool's output on its span (only with sensitive data on)."""
    if sensitive:
        text = output if isinstance(output, str) else json.dumps(output, default=str)
        current.set_many({"gen_ai.tool.call.result": redact(text)})
