"""The run loop: model → tool calls → tool outputs → model, until a final answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from sandmem._agent import Agent
from sandmem._errors import MaxTurnsExceeded, ModelBehaviorError, UserError
from sandmem._items import Item, item_kind, message_text, normalize_input
from sandmem._prompts import load_prompt, render_prompt
from sandmem._run_config import RunConfig
from sandmem._run_context import RunOutcome, SandboxRunContext, TerminalState
from sandmem._sandbox_agent import SandboxAgent
from sandmem._sandbox_scope import sandbox_scope
from sandmem._session import Session
from sandmem._settings import ModelSettings
from sandmem._tools import FunctionTool, ToolArgumentsError
from sandmem._usage import Usage
from sandmem.capabilities._base import Capability
from sandmem.models._base import Model, ModelRequest, OutputSchema

logger = logging.getLogger("sandmem.run")

T = TypeVar("T")


@dataclass
class RunResult:
    """What a run produced. ``new_items`` are the items of this run only (model outputs and
    tool outputs); ``to_input_list()`` gives input + new items for a follow-up run."""

    input: str | list[Item]
    new_items: list[Item]
    final_output: Any
    last_agent: Agent
    usage: Usage = field(default_factory=Usage)

    def final_output_as(self, cls: type[T], raise_if_incorrect_type: bool = False) -> T:
        """``final_output`` typed as ``cls`` (checked when ``raise_if_incorrect_type``)."""
        if raise_if_incorrect_type and not isinstance(self.final_output, cls):
            raise TypeError(f"final output is {type(self.final_output).__name__}, not {cls}")
        return cast(T, self.final_output)

    def to_input_list(self) -> list[Item]:
        return normalize_input(self.input) + [dict(item) for item in self.new_items]


def _error_output(exc: BaseException) -> str:
    return f"Error: {type(exc).__name__}: {exc}"


async def _invoke_tool(tools: dict[str, FunctionTool], call: Item) -> Item:
    name = str(call.get("name", ""))
    output: Any
    tool = tools.get(name)
    if tool is None:
        available = ", ".join(sorted(tools)) or "none"
        output = f"Error: UnknownTool: there is no tool named {name!r}; available: {available}"
    else:
        try:
            output = await tool.on_invoke(str(call.get("arguments") or "{}"))
        except ToolArgumentsError as exc:
            output = _error_output(exc)
        except Exception as exc:
            logger.debug("tool %s raised", name, exc_info=True)
            output = _error_output(exc)
    return {"type": "function_call_output", "call_id": call.get("call_id"), "output": output}


def _output_schema(output_type: type[Any] | None) -> OutputSchema | None:
    if output_type is None:
        return None
    from sandmem._schema import output_schema_for

    return output_schema_for(output_type)


def _final_output(agent: Agent, output: Sequence[Item]) -> tuple[bool, Any]:
    """(has_final, value) from one model turn without tool calls."""
    messages = [i for i in output if item_kind(i) == "message" and i.get("role") == "assistant"]
    if not messages:
        return False, None
    text = message_text(messages[-1])
    if agent.output_type is None:
        return True, text
    from sandmem._schema import parse_structured_output

    return True, parse_structured_output(agent.output_type, text)


@dataclass
class _Prepared:
    model: Model
    instructions: str | None
    tools: dict[str, FunctionTool]
    capabilities: list[Capability]
    settings: ModelSettings


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
    missing: set[str] = set()
    for cap in capabilities:
        for required in cap.required_capability_types():
            if not any(isinstance(other, required) for other in capabilities):
                missing.add(required.__name__)
    if missing:
        names = ", ".join(f"{name}()" for name in sorted(missing))
        raise UserError(
            f"the agent's capabilities require {names}; add them to SandboxAgent(capabilities=...)"
        )


def _collect_tools(agent: Agent, capabilities: list[Capability]) -> dict[str, FunctionTool]:
    tools: dict[str, FunctionTool] = {}
    for tool in [*agent.tools, *(t for cap in capabilities for t in cap.tools())]:
        if tool.name in tools:
            raise UserError(f"two tools are named {tool.name!r}; tool names must be unique")
        tools[tool.name] = tool
    return tools


async def _prepare(agent: Agent, ctx: SandboxRunContext, config: RunConfig) -> _Prepared:
    """Everything that can refuse a run happens here, before the first model call."""
    capabilities: list[Capability] = []
    parts = [agent.instructions] if agent.instructions else []
    if isinstance(agent, SandboxAgent):
        assert ctx.sandbox is not None
        capabilities = [cap.bind(ctx.sandbox) for cap in agent.capabilities]
        _check_requirements(capabilities)
        parts.append(
            render_prompt(load_prompt("sandmem", "sandbox"), root=ctx.sandbox.display_root)
        )
    tools = _collect_tools(agent, capabilities)
    model = _resolve_model(agent, config)
    for cap in capabilities:
        await cap.on_run_start(ctx)
    for cap in capabilities:
        extra = await cap.instructions(ctx)
        if extra:
            parts.append(extra)
    return _Prepared(
        model=model,
        instructions="\n\n".join(parts) or None,
        tools=tools,
        capabilities=capabilities,
        settings=ModelSettings.coerce(agent.model_settings),
    )


async def _loop(
    agent: Agent,
    prep: _Prepared,
    transcript: list[Item],
    generated: list[Item],
    usage: Usage,
    max_turns: int,
) -> Any:
    """Run turns, appending to ``generated`` as it goes; return the final output."""
    schema = _output_schema(agent.output_type)
    specs = [tool.spec() for tool in prep.tools.values()]
    for _ in range(max_turns):
        request = ModelRequest(
            instructions=prep.instructions,
            input=[*transcript, *generated],
            tools=specs,
            output_schema=schema,
            settings=prep.settings,
        )
        response = await prep.model.get_response(request)
        usage.requests += 1
        usage.input_tokens += response.usage.input_tokens
        usage.output_tokens += response.usage.output_tokens
        generated.extend(response.output)
        calls = [item for item in response.output if item_kind(item) == "function_call"]
        if calls:
            outputs = await asyncio.gather(*(_invoke_tool(prep.tools, c) for c in calls))
            generated.extend(outputs)
            continue
        has_final, value = _final_output(agent, response.output)
        if not has_final:
            raise ModelBehaviorError(
                f"model {prep.model.name!r} returned neither a tool call nor a message"
            )
        return value
    raise MaxTurnsExceeded(
        f"the run reached max_turns={max_turns} without a final answer; raise max_turns or "
        "simplify the task",
        items=generated,
    )


def _terminal_state(exc: BaseException) -> TerminalState:
    if isinstance(exc, MaxTurnsExceeded):
        return "max_turns_exceeded"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    return "failed"


async def _finish(prep: _Prepared, ctx: SandboxRunContext, outcome: RunOutcome) -> None:
    for cap in prep.capabilities:
        try:
            await asyncio.shield(cap.on_run_end(ctx, outcome))
        except Exception:
            logger.exception("%s failed at the end of a run", type(cap).__name__)


async def _run(
    agent: Agent,
    input: str | list[Item],
    session: Session | None,
    config: RunConfig,
    max_turns: int,
    conversation_id: str | None,
) -> RunResult:
    input_items = normalize_input(input)
    async with sandbox_scope(agent, config) as sandbox:
        ctx = SandboxRunContext(
            agent=agent,
            input=input_items,
            run_config=config,
            session=session,
            conversation_id=conversation_id,
            sandbox=sandbox,
        )
        prep = await _prepare(agent, ctx, config)
        history = await session.get_items() if session is not None else []
        generated: list[Item] = []
        usage = Usage()
        try:
            final = await _loop(agent, prep, [*history, *input_items], generated, usage, max_turns)
        except BaseException as exc:
            outcome = RunOutcome(list(generated), _terminal_state(exc), exception=exc)
            await _finish(prep, ctx, outcome)
            raise
        stored_final = final.model_dump() if isinstance(final, BaseModel) else final
        outcome = RunOutcome(
            list(generated), "completed", final_output=stored_final, has_final_output=True
        )
        await _finish(prep, ctx, outcome)
        if session is not None:
            await session.add_items([*input_items, *generated])
        return RunResult(input, generated, final, agent, usage)


class Runner:
    """Runs agents. ``run`` is the async core; ``run_sync`` wraps it for blocking callers."""

    @staticmethod
    async def run(
        agent: Agent,
        input: str | list[Item],
        *,
        session: Session | None = None,
        run_config: RunConfig | None = None,
        max_turns: int = 10,
        conversation_id: str | None = None,
    ) -> RunResult:
        """Run ``agent`` on ``input`` until a final answer.

        Raises ``MaxTurnsExceeded`` at the turn limit, ``ModelBehaviorError`` for unusable model
        output, ``UserError`` for misuse (before the first model call).
        """
        if max_turns < 1:
            raise UserError("max_turns must be at least 1")
        config = run_config or RunConfig()
        return await _run(agent, input, session, config, max_turns, conversation_id)

    @staticmethod
    def run_sync(
        agent: Agent,
        input: str | list[Item],
        *,
        session: Session | None = None,
        run_config: RunConfig | None = None,
        max_turns: int = 10,
        conversation_id: str | None = None,
    ) -> RunResult:
        """``run`` for code without an event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise UserError(
                "Runner.run_sync cannot be called from a running event loop; await Runner.run"
            )
        return asyncio.run(
            Runner.run(
                agent,
                input,
                session=session,
                run_config=run_config,
                max_turns=max_turns,
                conversation_id=conversation_id,
            )
        )
