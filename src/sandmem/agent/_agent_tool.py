"""``Agent.as_tool``: another agent offered to the model as a function tool.

Calling the tool runs the agent as a **nested run** of the calling run: its own turns (its own
``max_turns``), the same ``context`` object, the calling run's ``RunConfig`` unless one is
given, and its own ``hooks``. When it ends, its usage is added to the calling run's usage and
its items are recorded in the calling run's memory segment, just before the tool's output, so
phase one sees what the sub-agent did. The model sees only the tool's output: the nested run's
final output (or ``custom_output_extractor(result)``).

The nested run itself is started by the run loop (``run/``), which hands each tool call a
``ToolContext.run_nested`` function; this module, one floor down, only builds the tool.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypedDict

from pydantic import BaseModel, ConfigDict, TypeAdapter

from sandmem._errors import UserError
from sandmem.agent._context import ToolContext
from sandmem.agent._tools import (
    EnabledFunction,
    FunctionTool,
    ToolErrorFunction,
    default_tool_error_function,
    parse_arguments,
    to_tool_output,
)

if TYPE_CHECKING:
    from sandmem.agent._agent import Agent
    from sandmem.agent._hooks import RunHooks
    from sandmem.agent._run_config import RunConfig


class AgentToolStreamEvent(TypedDict):
    """What ``as_tool(on_stream=...)`` receives for each stream event of the nested run."""

    event: Any
    agent: Agent
    tool_call: dict[str, Any] | None


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: str


def _schema_for(parameters: type[Any] | None) -> tuple[dict[str, Any], type[Any]]:
    if parameters is None:
        schema = _Input.model_json_schema()
        schema.pop("title", None)
        schema["properties"]["input"] = {
            "type": "string",
            "description": "The task or question for the agent, in full.",
        }
        return schema, _Input
    from sandmem.agent._schema import strict_json_schema

    schema = TypeAdapter(parameters).json_schema()
    schema.pop("title", None)
    return strict_json_schema(schema), parameters


def _nested_input(params: type[Any], arguments: str) -> str:
    if params is _Input:
        return str(parse_arguments(_Input, arguments)["input"])
    value = TypeAdapter(params).validate_json(arguments or "{}")
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json.dumps(dataclasses.asdict(value))
    return json.dumps(value)


def agent_as_tool(
    agent: Agent,
    tool_name: str | None,
    tool_description: str | None,
    *,
    custom_output_extractor: Callable[[Any], Awaitable[Any]] | None = None,
    is_enabled: bool | EnabledFunction = True,
    on_stream: Callable[[AgentToolStreamEvent], Any] | None = None,
    run_config: RunConfig | None = None,
    max_turns: int | None = None,
    hooks: RunHooks[Any] | None = None,
    failure_error_function: ToolErrorFunction | None = default_tool_error_function,
    parameters: type[Any] | None = None,
) -> FunctionTool:
    """``agent`` as a ``FunctionTool`` (see the module docstring)."""
    if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
        raise UserError("as_tool(max_turns=...) must be at least 1")
    schema, params = _schema_for(parameters)

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> Any:
        if ctx.run_nested is None:
            raise UserError(
                f"the tool of agent {agent.name!r} runs inside a run; call it through Runner"
            )
        listener = None
        if on_stream is not None:
            call = {"type": "function_call", "call_id": ctx.tool_call_id, "name": ctx.tool_name}
            call["arguments"] = arguments

            async def listener(event: Any) -> None:
                value = on_stream({"event": event, "agent": agent, "tool_call": call})
                if inspect.isawaitable(value):
                    await value

        result = await ctx.run_nested(
            agent,
            _nested_input(params, arguments),
            max_turns=max_turns,
            run_config=run_config,
            hooks=hooks,
            on_stream=listener,
        )
        if custom_output_extractor is not None:
            return to_tool_output(await custom_output_extractor(result))
        return to_tool_output(result.final_output)

    return FunctionTool(
        name=tool_name or agent.name.lower().replace(" ", "_"),
        description=tool_description or agent.handoff_description or "",
        params_json_schema=schema,
        on_invoke_tool=on_invoke_tool,
        is_enabled=is_enabled,
        failure_error_function=failure_error_function,
    )
