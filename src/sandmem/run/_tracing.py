"""Tracing of a run as a listener of the run loop's one emit point (``_run_loop.Emitter``).

``run_tracer(config)`` returns a listener (or ``None`` when tracing is off) that turns a run's
lifecycle events into spans through ``sandmem.tracing``:

- the first event starts ``invoke_agent <agent>`` (child of the span current when the run
  started), with the run's workflow name, trace id, group id and trace metadata; ``RunEndEvent``
  ends it with the outcome and the run's total usage;
- ``LLMStartEvent`` / ``LLMEndEvent`` bracket ``chat <model>`` (GenAI attributes, tokens as
  the response reports them);
- ``ToolStartEvent`` / ``ToolEndEvent`` bracket ``execute_tool <tool>``. Tool events come from
  the tool's own task, so the tool span is made current there: spans made inside a tool (a
  nested run, the tool's own instrumentation) nest under it.

A span left open by a failure (a model call or tool that raised) is ended at ``RunEndEvent``.
A tracing failure is logged and never fails the run.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sandmem import tracing
from sandmem.models._base import Model

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sandmem.agent._agent import Agent
    from sandmem.agent._run_config import RunConfig

logger = logging.getLogger("sandmem.tracing")

#: the default provider's default model (what a run without a model name asks for)
_DEFAULT_MODEL = "default"


class _RunTracer:
    """The spans of one run (one instance per run)."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.sensitive = bool(getattr(config, "trace_include_sensitive_data", False))
        self.run: tracing.Span | None = None
        self.model_span: tracing.Span | None = None
        self.tools: dict[str, tuple[tracing.Span, object | None]] = {}

    async def __call__(self, event: Any) -> None:
        try:
            self.handle(event)
        except Exception:
            logger.exception("tracing failed on a %s event", getattr(event, "type", "?"))

    def handle(self, event: Any) -> None:
        kind = getattr(event, "type", "")
        if self.run is None and kind != "run_end":
            self.run = self._start_run(event.agent if hasattr(event, "agent") else None, event)
        if kind == "llm_start":
            self._start_model(event)
        elif kind == "llm_end":
            self._end_model(event)
        elif kind == "tool_start":
            self._start_tool(event)
        elif kind == "tool_end":
            self._end_tool(event)
        elif kind == "run_end":
            self._end_run(event)

    # ------------------------------------------------------------ run

    def _start_run(self, agent: Agent | None, event: Any) -> tracing.Span:
        agent = agent if agent is not None else getattr(event, "new_agent", None)
        name = getattr(agent, "name", "agent")
        config = self.config
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "sandmem.workflow_name": config.workflow_name,
            "sandmem.trace_id": getattr(config, "trace_id", None),
            "sandmem.group_id": config.group_id,
        }
        metadata = getattr(config, "trace_metadata", None) or {}
        for key, value in metadata.items():
            attributes[f"sandmem.trace_metadata.{key}"] = str(value)
        return tracing.start_span(f"invoke_agent {name}", attributes)

    def _end_run(self, event: Any) -> None:
        if self.model_span is not None:
            self.model_span.fail("Interrupted", "the model call did not return")
            self.model_span.end()
            self.model_span = None
        for call_id, (span, _) in list(self.tools.items()):
            span.fail("Interrupted", "the tool call did not return")
            span.end()
            del self.tools[call_id]
        if self.run is None:
            return
        outcome = event.outcome
        usage = event.context.usage
        self.run.set_many(
            {
                "sandmem.run.terminal_state": outcome.terminal_state,
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "sandmem.usage.requests": usage.requests,
            }
        )
        if outcome.exception is not None:
            exc = outcome.exception
            self.run.fail(type(exc).__name__, str(exc))
        self.run.end()

    # ------------------------------------------------------------ model calls

    def _model(self, agent: Agent) -> tuple[str, Model | None]:
        chosen = self.config.model if self.config.model is not None else agent.model
        if isinstance(chosen, Model):
            return chosen.name, chosen
        return str(chosen or _DEFAULT_MODEL), None

    def _start_model(self, event: Any) -> None:
        name, model = self._model(event.agent)
        attributes = tracing.request_attributes(
            model if model is not None else _Named(name), event.request, self.sensitive
        )
        if model is None:  # a name resolved by the run's provider
            from sandmem.models._provider import OpenAIProvider

            provider = self.config.model_provider
            system = type(provider).__module__.split(".")[0]
            if provider is None or isinstance(provider, OpenAIProvider):
                system = "openai"
            attributes["gen_ai.system"] = attributes["gen_ai.provider.name"] = system
        attributes["sandmem.turn"] = event.turn
        self.model_span = tracing.start_span(
            f"chat {name}", attributes, parent=self.run, client=True
        )

    def _end_model(self, event: Any) -> None:
        if self.model_span is None:
            return
        name, model = self._model(event.agent)
        self.model_span.set_many(
            tracing.response_attributes(
                model if model is not None else _Named(name), event.response, self.sensitive
            )
        )
        self.model_span.end()
        self.model_span = None

    # ------------------------------------------------------------ tool calls

    def _start_tool(self, event: Any) -> None:
        ctx = event.context
        call = {"call_id": ctx.tool_call_id, "arguments": ctx.tool_arguments}
        attributes = tracing.tool_attributes(event.tool.name, call, self.sensitive)
        span = tracing.start_span(f"execute_tool {event.tool.name}", attributes, parent=self.run)
        self.tools[ctx.tool_call_id] = (span, span.attach())

    def _end_tool(self, event: Any) -> None:
        found = self.tools.pop(event.context.tool_call_id, None)
        if found is None:
            return
        span, token = found
        tracing.Span.detach(token)
        tracing.tool_result(span, event.result, self.sensitive)
        if event.error is not None:
            span.fail(type(event.error).__name__, str(event.error))
        span.end()


class _Named(Model):
    """Stands for a model known only by name (resolved by the run's provider)."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def get_response(self, request: Any) -> Any:  # pragma: no cover - never called
        raise NotImplementedError


def run_tracer(config: RunConfig) -> Callable[[Any], Awaitable[None]] | None:
    """The tracing listener of one run, or ``None`` when tracing is off (OpenTelemetry not
    installed, or ``RunConfig(tracing_disabled=True)``)."""
    if getattr(config, "tracing_disabled", False) or not tracing.is_available():
        return None
    return _RunTracer(config)
