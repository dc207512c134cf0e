"""The one run loop: model → tool calls → tool outputs → model, until a final answer.

``execute`` is the core every view of a run is built on (``Runner.run``, ``run_sync`` and
``run_streamed`` in ``run/_runner.py``). It produces events (``agent/_stream_events.py``) and
hands each one to a single emit point, ``Emitter.emit``, which passes it, in order, to the
run's listeners:

- the hooks listener (``hooks_listener``): ``RunHooks`` / ``AgentHooks`` callbacks;
- for ``run_streamed``, the queue behind ``RunResultStreaming.stream_events()``;
- any listener a caller adds (``RunSpec.listeners``): this is the seam for tracing — a tracer
  is one more ``Listener`` receiving every stream and lifecycle event, ``RunEndEvent`` last.

What can refuse a run (missing capabilities, a layout conflict, a bad rollout id, unknown tool
names) happens in ``_prepare``, before the first model call and before any event. Capabilities'
``on_run_start`` runs there and their ``on_run_end`` runs once when the run ends, completed or
not, whichever view started it, so memory is recorded the same way for every view.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from sandmem._errors import (
    MaxTurnsExceeded,
    ModelBehaviorError,
    RepeatedToolCallError,
    ToolTimeoutError,
    UserError,
)
from sandmem._items import Item, item_kind, message_text, normalize_input, user_message
from sandmem._prompts import load_prompt, render_prompt
from sandmem._settings import DEFAULT_MAX_TOKENS, ModelSettings, with_max_tokens
from sandmem._usage import RequestUsage, Usage
from sandmem.agent._agent import Agent
from sandmem.agent._capability import (
    Capability,
    bind_for_run,
    capability_instructions,
    missing_requirements,
)
from sandmem.agent._context import (
    RunContextWrapper,
    RunOutcome,
    SandboxRunContext,
    TerminalState,
    ToolContext,
)
from sandmem.agent._hooks import RunHooks
from sandmem.agent._mcp_tools import mcp_tools
from sandmem.agent._run_config import RunConfig
from sandmem.agent._run_items import as_run_item
from sandmem.agent._sandboxed import SandboxedAgent
from sandmem.agent._schema import json_repair_message
from sandmem.agent._session import Session
from sandmem.agent._stream_events import (
    AgentEndEvent,
    AgentStartEvent,
    AgentUpdatedStreamEvent,
    LLMEndEvent,
    LLMStartEvent,
    RawResponsesStreamEvent,
    RunEndEvent,
    RunEvent,
    ToolEndEvent,
    ToolStartEvent,
    run_item_event,
)
from sandmem.agent._tool_use import FunctionToolResult, tools_final_output
from sandmem.agent._tools import FunctionTool, to_tool_output
from sandmem.models._base import Model, ModelRequest, ModelResponse, OutputSchema
from sandmem.run._model_retry import with_retries
from sandmem.run._sandbox_scope import sandbox_scope
from sandmem.run._tracing import run_tracer
from sandmem.sandboxes._session import SandboxSession
from sandmem.sandboxes._workspace_scope import SandboxWorkspaceScope

logger = logging.getLogger("sandmem.run")

#: the event types ``stream_events()`` and ``as_tool(on_stream=...)`` pass on
STREAM_EVENT_TYPES = frozenset(
    {"raw_response_event", "run_item_stream_event", "agent_updated_stream_event"}
)

#: receives every event of a run, in order; may be async-only (awaited before the run goes on)
Listener = Callable[[RunEvent], Awaitable[None]]


class TurnCancelled(Exception):
    """Internal: ``RunResultStreaming.cancel(mode="after_turn")`` stopped the run."""


@dataclass
class RunSpec:
    """What the caller asked for (``Runner``'s arguments, checked)."""

    agent: Agent
    input: str | list[Item]
    context: Any = None
    #: ``None``: no limit
    max_turns: int | None = 10
    hooks: RunHooks[Any] | None = None
    run_config: RunConfig = field(default_factory=RunConfig)
    previous_response_id: str | None = None
    conversation_id: str | None = None
    session: Session | None = None
    #: model calls use ``Model.stream_response`` (raw events are emitted)
    stream: bool = False
    listeners: list[Listener] = field(default_factory=list)
    #: builds the result of a nested run (``Agent.as_tool``): ``(spec, progress, final)``
    result_factory: Callable[[RunSpec, RunProgress, Any], Any] | None = None


@dataclass
class RunProgress:
    """The state of a run as it goes, shared with the view that started it."""

    context_wrapper: RunContextWrapper[Any]
    current_agent: Agent
    new_items: list[Item] = field(default_factory=list)
    raw_responses: list[ModelResponse] = field(default_factory=list)
    current_turn: int = 0
    final_output: Any = None
    has_final_output: bool = False
    cancel_after_turn: bool = False
    #: the items of nested runs (``Agent.as_tool``), by the call id of the tool call
    nested_items: dict[str, list[Item]] = field(default_factory=dict)

    def recorded_items(self) -> list[Item]:
        """``new_items`` with each nested run's items placed just before its tool's output:
        what memory records (the model sees ``new_items`` only)."""
        if not self.nested_items:
            return list(self.new_items)
        items: list[Item] = []
        for item in self.new_items:
            if item_kind(item) == "function_call_output":
                items.extend(self.nested_items.get(str(item.get("call_id", "")), []))
            items.append(item)
        return items

    @property
    def usage(self) -> Usage:
        return self.context_wrapper.usage

    @property
    def last_response_id(self) -> str | None:
        return self.raw_responses[-1].response_id if self.raw_responses else None


class Emitter:
    """The one emit point of a run: every event goes to every listener, in order."""

    def __init__(self, listeners: Sequence[Listener]) -> None:
        self._listeners = list(listeners)

    async def emit(self, event: RunEvent) -> None:
        for listener in self._listeners:
            await listener(event)


async def _call_hook(fn: Callable[..., Any] | None, *args: Any) -> None:
    if fn is None:
        return
    result = fn(*args)
    if inspect.isawaitable(result):
        await result


def hooks_listener(hooks: RunHooks[Any] | None) -> Listener:
    """A listener calling the run's hooks, then the agent's, for each lifecycle event."""

    async def listen(event: RunEvent) -> None:
        names: tuple[str, str]
        args: tuple[Any, ...]
        match event:
            case AgentStartEvent(context=ctx, agent=agent):
                names, args = ("on_agent_start", "on_start"), (ctx, agent)
            case AgentEndEvent(context=ctx, agent=agent, output=output):
                names, args = ("on_agent_end", "on_end"), (ctx, agent, output)
            case LLMStartEvent(context=ctx, agent=agent, request=request):
                names = ("on_llm_start", "on_llm_start")
                args = (ctx, agent, request.instructions, list(request.input))
            case LLMEndEvent(context=ctx, agent=agent, response=response):
                names, args = ("on_llm_end", "on_llm_end"), (ctx, agent, response)
            case ToolStartEvent(context=ctx, agent=agent, tool=tool):
                names, args = ("on_tool_start", "on_tool_start"), (ctx, agent, tool)
            case ToolEndEvent(context=ctx, agent=agent, tool=tool, result=result):
                names, args = ("on_tool_end", "on_tool_end"), (ctx, agent, tool, result)
            case _:
                return
        await _call_hook(getattr(hooks, names[0], None), *args)
        await _call_hook(getattr(args[1].hooks, names[1], None), *args)

    return listen


@dataclass
class _Prepared:
    model: Model
    instructions: list[str]
    tools: list[FunctionTool]
    capabilities: list[Capability]
    settings: ModelSettings
    output_schema: OutputSchema | None


def _resolve_model(agent: Agent, config: RunConfig) -> Model:
    """The run's model. Names are resolved by the run's provider, else the process's shared
    default provider (whose client every run reuses; it is not closed per run)."""
    chosen = config.model if config.model is not None else agent.model
    if isinstance(chosen, Model):
        return chosen
    provider = config.model_provider
    if provider is None:
        from sandmem.models._provider import default_provider

        provider = default_provider()
    return provider.get_model(chosen)


def _check_requirements(capabilities: list[Capability]) -> None:
    missing = missing_requirements(capabilities)
    if missing:
        names = ", ".join(sorted(missing))
        raise UserError(
            f"the agent's capabilities require {names}; add them to SandboxAgent(capabilities=...)"
        )


def _collect_tools(
    agent: Agent, capabilities: list[Capability], mcp: list[FunctionTool]
) -> list[FunctionTool]:
    tools: dict[str, FunctionTool] = {}
    for tool in [*agent.tools, *(t for cap in capabilities for t in cap.tools()), *mcp]:
        if tool.name in tools:
            raise UserError(
                f"two tools are named {tool.name!r}; tool names must be unique (an MCP "
                "server's tools can be narrowed with its tool_filter)"
            )
        tools[tool.name] = tool
    return list(tools.values())


def _output_schema(output_type: Any) -> OutputSchema | None:
    if output_type is None:
        return None
    from sandmem.agent._schema import agent_output_schema

    return agent_output_schema(output_type)


async def _workspace_scope(sandbox: SandboxSession, config: RunConfig) -> SandboxWorkspaceScope:
    """The run's working directory (``SandboxRunConfig.cwd``), checked to be a directory."""
    scope = SandboxWorkspaceScope.from_cwd(config.sandbox.cwd if config.sandbox else None)
    if scope.cwd is not None and not await sandbox.is_dir(scope.cwd):
        raise UserError(
            f"SandboxRunConfig(cwd={scope.cwd!r}): no such directory in the workspace; create "
            "it first (a manifest Dir entry, or session.mkdir) or fix the path"
        )
    return scope


async def _prepare(spec: RunSpec, ctx: SandboxRunContext) -> _Prepared:
    """Everything that can refuse a run happens here, before the first model call."""
    agent, config = spec.agent, spec.run_config
    capabilities: list[Capability] = []
    parts: list[str] = []
    if isinstance(agent, SandboxedAgent):
        assert ctx.sandbox is not None
        scope = await _workspace_scope(ctx.sandbox, config)
        capabilities = [bind_for_run(cap, ctx.sandbox) for cap in agent.capabilities]
        for cap in capabilities:
            cap.bind_workspace_scope(scope)
        _check_requirements(capabilities)
        root = ctx.sandbox.display_root
        start = scope.resource_path(root, scope.cwd) if scope.cwd else root
        parts.append(render_prompt(load_prompt("sandmem", "sandbox"), root=root, cwd=start))
    run_context = ctx.context_wrapper or RunContextWrapper(spec.context)
    mcp = await mcp_tools(agent, run_context) if agent.mcp_servers else []
    tools = _collect_tools(agent, capabilities, mcp)
    schema = _output_schema(agent.output_type)
    model = _resolve_model(agent, config)
    settings = with_max_tokens(agent.settings.resolve(config.model_settings), DEFAULT_MAX_TOKENS)
    for cap in capabilities:
        await cap.on_run_start(ctx)
    for cap in capabilities:
        extra = await capability_instructions(cap, ctx)
        if extra:
            parts.append(extra)
    return _Prepared(model, parts, tools, capabilities, settings, schema)


def _final_output(agent: Agent, output: Sequence[Item]) -> tuple[bool, Any]:
    """(has_final, value) from one model turn without tool calls. For plain text a turn without
    a message ends the run with ``""`` (as the reference does); structured output needs one."""
    messages = [i for i in output if item_kind(i) == "message" and i.get("role") == "assistant"]
    if agent.output_type is None:
        return True, message_text(messages[-1]) if messages else ""
    if not messages:
        return False, None
    text = message_text(messages[-1])
    from sandmem.agent._schema import parse_agent_output

    return True, parse_agent_output(agent.output_type, text)


def _terminal_state(exc: BaseException) -> TerminalState:
    if isinstance(exc, MaxTurnsExceeded):
        return "max_turns_exceeded"
    if isinstance(exc, asyncio.CancelledError | TurnCancelled):
        return "cancelled"
    return "failed"


class _Turns:
    """The turns of one prepared run (one instance per run)."""

    def __init__(
        self, spec: RunSpec, prep: _Prepared, progress: RunProgress, emitter: Emitter
    ) -> None:
        self.spec, self.prep, self.progress, self.emit = spec, prep, progress, emitter.emit
        self.agent = spec.agent
        self.ctx = progress.context_wrapper
        conversation = spec.conversation_id
        #: server-side conversation state (Responses API) replaces resending the transcript
        self.conversation = (
            conversation if conversation and conversation.startswith("conv_") else None
        )
        self.previous_response_id = spec.previous_response_id
        #: failures of each tool call in this run, by (tool, arguments as canonical JSON)
        self.failures: dict[tuple[str, str], int] = {}
        #: whether the run already asked the model to repair an unparsable structured answer
        self.repaired = False

    async def run(self, transcript: list[Item], input_items: list[Item]) -> Any:
        server_state = self.previous_response_id is not None or self.conversation is not None
        unsent: list[Item] = list(input_items)
        await self.emit(AgentUpdatedStreamEvent(self.agent))
        await self.emit(AgentStartEvent(self.ctx, self.agent))
        generated = self.progress.new_items
        limit = self.spec.max_turns
        turns = itertools.count(1) if limit is None else range(1, limit + 1)
        for turn in turns:
            self.progress.current_turn = turn
            model_input = list(unsent) if server_state else [*transcript, *generated]
            response = await self._model_turn(turn, model_input)
            unsent = []
            calls = [item for item in response.output if item_kind(item) == "function_call"]
            if calls:
                outputs, results = await self._run_tools(calls)
                unsent.extend(outputs)
                if self.progress.cancel_after_turn:
                    raise TurnCancelled()
                decision = await tools_final_output(self.agent.tool_use_behavior, self.ctx, results)
                if not decision.is_final_output:
                    continue
                has_final, value = True, decision.final_output
            else:
                try:
                    has_final, value = _final_output(self.agent, response.output)
                except ModelBehaviorError as exc:
                    if self.repaired:
                        raise
                    self.repaired = True  # one repair turn per run, then the error stands
                    repair = user_message(json_repair_message(exc))
                    generated.append(as_run_item(repair, self.agent))
                    unsent.append(repair)
                    continue
            if not has_final:
                raise ModelBehaviorError(
                    f"model {self.prep.model.name!r} returned neither a tool call nor the "
                    "structured output its output_type needs"
                )
            self.progress.final_output, self.progress.has_final_output = value, True
            await self.emit(AgentEndEvent(self.ctx, self.agent, value))
            return value
        raise MaxTurnsExceeded(
            f"the run reached max_turns={self.spec.max_turns} without a final answer; raise "
            "max_turns or simplify the task",
            items=generated,
        )

    async def _request(self, model_input: list[Item]) -> ModelRequest:
        own = await self.agent.get_instructions(self.ctx)
        parts = [own, *self.prep.instructions] if own else self.prep.instructions
        tools = [t.spec() for t in self.prep.tools if await t.enabled_for(self.ctx, self.agent)]
        return ModelRequest(
            instructions="\n\n".join(parts) or None,
            input=model_input,
            tools=tools,
            output_schema=self.prep.output_schema,
            settings=self.prep.settings,
            previous_response_id=self.previous_response_id,
            conversation_id=self.conversation,
            prompt=await self.agent.get_prompt(self.ctx) if self.agent.prompt else None,
        )

    async def _model_turn(self, turn: int, model_input: list[Item]) -> ModelResponse:
        request = await self._request(model_input)
        await self.emit(LLMStartEvent(self.ctx, self.agent, request, turn))
        response = await self._call_model(request)
        usage = self.ctx.usage
        usage.requests += 1
        usage.input_tokens += response.usage.input_tokens
        usage.output_tokens += response.usage.output_tokens
        usage.request_usage_entries.append(
            RequestUsage(response.usage.input_tokens, response.usage.output_tokens)
        )
        self.progress.raw_responses.append(response)
        if self.previous_response_id is not None and response.response_id:
            self.previous_response_id = response.response_id
        await self.emit(LLMEndEvent(self.ctx, self.agent, request, response, turn))
        for item in response.output:
            item = as_run_item(item, self.agent)
            self.progress.new_items.append(item)
            event = run_item_event(self.agent, item)
            if event is not None:
                await self.emit(event)
        return response

    async def _call_model(self, request: ModelRequest) -> ModelResponse:
        model = self.prep.model
        if not self.spec.stream:
            return await with_retries(request, lambda: model.get_response(request))
        emitted = False

        async def stream_once() -> ModelResponse:
            nonlocal emitted
            response: ModelResponse | None = None
            async for data in model.stream_response(request):
                if isinstance(data, ModelResponse):
                    response = data
                else:
                    emitted = True
                    await self.emit(RawResponsesStreamEvent(data))
            if response is None:
                raise ModelBehaviorError(
                    f"model {model.name!r} ended its stream without a response"
                )
            return response

        return await with_retries(request, stream_once, stream=True, started=lambda: emitted)

    async def _run_tools(self, calls: list[Item]) -> tuple[list[Item], list[FunctionToolResult]]:
        """The output items of ``calls`` (run concurrently), and the results of the calls to
        known tools (for ``tool_use_behavior``)."""
        tools = {t.name: t for t in self.prep.tools if await t.enabled_for(self.ctx, self.agent)}
        invoked = await asyncio.gather(*(self._invoke_tool(tools, call) for call in calls))
        done = [(output, value) for output, value, _ in invoked]
        outputs = [output for output, _ in done]
        results = []
        for call, (output, value) in zip(calls, done, strict=True):
            item = as_run_item(output, self.agent)
            self.progress.new_items.append(item)
            event = run_item_event(self.agent, item)
            if event is not None:
                await self.emit(event)
            tool = tools.get(str(call.get("name", "")))
            if tool is not None:
                results.append(FunctionToolResult(tool, value, item))
        for call, (output, _, failed) in zip(calls, invoked, strict=True):
            if failed:
                self._count_failure(call, output)
        return outputs, results

    def _count_failure(self, call: Item, output: Item) -> None:
        """Count a failed call; the same call failing ``max_repeated_tool_failures`` times
        ends the run (a model repeating a malformed call would otherwise use every turn)."""
        limit = self.spec.run_config.max_repeated_tool_failures
        name, arguments = str(call.get("name", "")), str(call.get("arguments") or "{}")
        key = (name, _canonical(arguments))
        self.failures[key] = times = self.failures.get(key, 0) + 1
        if limit is None or times < limit:
            return
        error = str(output.get("output", ""))
        raise RepeatedToolCallError(
            f"the model sent the same failing call to {name!r} {times} times (last error: "
            f"{_clip(error)}); the run stops rather than spend its turns on it. A small "
            "model may need clearer instructions or a stronger model; "
            "RunConfig(max_repeated_tool_failures=...) sets the limit",
            tool_name=name,
            arguments=arguments,
            times=times,
            last_error=error,
            items=self.progress.new_items,
        )

    def _nested_runner(self, call_id: str) -> Callable[..., Awaitable[Any]]:
        """The function an agent tool calls to run its agent as a nested run of this call."""

        async def run_nested(
            agent: Agent,
            input: str | list[Item],
            *,
            max_turns: int | None = None,
            run_config: RunConfig | None = None,
            hooks: RunHooks[Any] | None = None,
            on_stream: Listener | None = None,
        ) -> Any:
            listeners: list[Listener] = []
            if on_stream is not None:
                forward = on_stream

                async def only_stream_events(event: RunEvent) -> None:
                    if event.type in STREAM_EVENT_TYPES:
                        await forward(event)

                listeners.append(only_stream_events)
            spec = RunSpec(
                agent=agent,
                input=input,
                context=self.ctx.context,
                max_turns=max_turns if max_turns is not None else 10,
                hooks=hooks,
                run_config=run_config or self.spec.run_config,
                stream=on_stream is not None,
                listeners=listeners,
                result_factory=self.spec.result_factory,
            )
            progress = RunProgress(RunContextWrapper(self.ctx.context), agent)
            try:
                final = await execute(spec, progress)
            finally:
                self.ctx.usage.add(progress.usage)
                recorded = [dict(item) for item in progress.recorded_items()]
                self.progress.nested_items.setdefault(call_id, []).extend(recorded)
            if spec.result_factory is None:
                return final
            return spec.result_factory(spec, progress, final)

        return run_nested

    async def _invoke_tool(
        self, tools: dict[str, FunctionTool], call: Item
    ) -> tuple[Item, Any, bool]:
        """The output item of ``call``, the tool's own return value (or the error text), and
        whether the call failed (an unknown tool, or the tool raised)."""
        name, call_id = str(call.get("name", "")), str(call.get("call_id", ""))
        arguments = str(call.get("arguments") or "{}")
        tool = tools.get(name)
        if tool is None:
            available = ", ".join(sorted(tools)) or "none"
            output: Any = (
                f"Error: UnknownTool: there is no tool named {name!r}; available: {available}"
            )
            item = {"type": "function_call_output", "call_id": call_id, "output": output}
            return item, output, True
        tool_ctx = ToolContext.for_call(self.ctx, name, call_id, arguments)
        tool_ctx.run_nested = self._nested_runner(call_id)
        await self.emit(ToolStartEvent(tool_ctx, self.agent, tool))
        error: Exception | None = None
        try:
            value = await tool.invoke(tool_ctx, arguments)
            output = to_tool_output(value)
        except ToolTimeoutError:
            raise
        except Exception as exc:
            if tool.failure_error_function is None:
                raise
            logger.debug("tool %s raised", name, exc_info=True)
            error = exc
            output = tool.failure_error_function(tool_ctx, exc)
            if inspect.isawaitable(output):
                output = await output
            output = value = to_tool_output(output)
        await self.emit(ToolEndEvent(tool_ctx, self.agent, tool, output, error))
        item = {"type": "function_call_output", "call_id": call_id, "output": output}
        return item, value, error is not None


def _canonical(arguments: str) -> str:
    """Arguments as canonical JSON (key order and spacing do not make a call different)."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return arguments.strip()


def _clip(text: str, limit: int = 300) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."


async def _finish(prep: _Prepared, ctx: SandboxRunContext, outcome: RunOutcome) -> None:
    for cap in prep.capabilities:
        try:
            await asyncio.shield(cap.on_run_end(ctx, outcome))
        except Exception:
            logger.exception("%s failed at the end of a run", type(cap).__name__)


def _stored(final: Any) -> Any:
    return final.model_dump() if isinstance(final, BaseModel) else final


async def execute(spec: RunSpec, progress: RunProgress) -> Any:
    """Run ``spec`` to its end, updating ``progress`` and emitting every event; return the
    final output. Raises what the run raised (``UserError`` before the first model call for
    misuse, ``MaxTurnsExceeded``, ``ModelBehaviorError``, ``ModelRequestError``...)."""
    input_items = normalize_input(spec.input)
    tracer = run_tracer(spec.run_config)  # OpenTelemetry spans: one more listener
    emitter = Emitter([hooks_listener(spec.hooks), *spec.listeners, *filter(None, [tracer])])
    async with sandbox_scope(spec.agent, spec.run_config) as sandbox:
        ctx = SandboxRunContext(
            agent=spec.agent,
            input=input_items,
            run_config=spec.run_config,
            session=spec.session,
            conversation_id=spec.conversation_id,
            sandbox=sandbox,
            context_wrapper=progress.context_wrapper,
        )
        prep = await _prepare(spec, ctx)
        history = await spec.session.get_items() if spec.session is not None else []
        turns = _Turns(spec, prep, progress, emitter)
        try:
            final = await turns.run([*history, *input_items], input_items)
        except BaseException as exc:
            outcome = RunOutcome(progress.recorded_items(), _terminal_state(exc), exception=exc)
            await _finish(prep, ctx, outcome)
            await _emit_end(emitter, progress, spec.agent, outcome)
            raise
        outcome = RunOutcome(
            progress.recorded_items(),
            "completed",
            final_output=_stored(final),
            has_final_output=True,
        )
        await _finish(prep, ctx, outcome)
        if spec.session is not None:
            await spec.session.add_items([*input_items, *progress.new_items])
        await emitter.emit(RunEndEvent(progress.context_wrapper, spec.agent, outcome))
        return final


async def _emit_end(
    emitter: Emitter, progress: RunProgress, agent: Agent, outcome: RunOutcome
) -> None:
    """``RunEndEvent`` for a run that failed: a listener's error is logged, never allowed to
    replace the run's own error."""
    try:
        await asyncio.shield(emitter.emit(RunEndEvent(progress.context_wrapper, agent, outcome)))
    except Exception:
        logger.exception("a run listener failed at the end of a failed run")
