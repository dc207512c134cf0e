"""Agents: an LLM with instructions, tools and an optional structured output type."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from sandmem._errors import UserError
from sandmem._settings import ModelSettings
from sandmem.agent._context import RunContextWrapper
from sandmem.agent._mcp import MCPServer
from sandmem.agent._mcp_tools import check_mcp_config
from sandmem.agent._schema import AgentOutputSchemaBase
from sandmem.agent._tool_use import ToolUseBehavior, check_tool_use_behavior
from sandmem.agent._tools import (
    EnabledFunction,
    FunctionTool,
    ToolErrorFunction,
    default_tool_error_function,
)
from sandmem.models._base import Model

if TYPE_CHECKING:
    from sandmem.agent._agent_tool import AgentToolStreamEvent
    from sandmem.agent._hooks import AgentHooks, RunHooks
    from sandmem.agent._run_config import RunConfig

#: dynamic instructions: ``(ctx, agent) -> str``, sync or async
InstructionsFunction = Callable[["RunContextWrapper[Any]", "Agent"], str | Awaitable[str]]


@dataclass
class GenerateDynamicPromptData:
    """What a dynamic ``prompt`` function gets: the run's context and the agent."""

    context: RunContextWrapper[Any]
    agent: Agent


#: a stored Responses API prompt: ``{"id": ..., "version": ..., "variables": {...}}``
Prompt = dict[str, Any]
DynamicPromptFunction = Callable[[GenerateDynamicPromptData], Any]


@dataclass
class Agent:
    """An LLM with instructions and tools.

    ``instructions`` is text, or a function ``(ctx, agent) -> str`` (sync or async) called before
    each model call with the run's ``RunContextWrapper``. ``model`` is a ``Model`` or a name
    resolved by the run's model provider (``None``: the provider's default). ``model_settings``
    (a ``ModelSettings`` or a dict of its fields) may be overridden per run by
    ``RunConfig.model_settings``. ``output_type`` (a pydantic model, or an ``AgentOutputSchema``)
    asks for validated structured output. ``hooks`` (an ``AgentHooks``) receives this agent's
    lifecycle callbacks. ``prompt`` names a stored prompt of the Responses API (``{"id",
    "version", "variables"}``), or is a function ``(GenerateDynamicPromptData) -> prompt``
    (sync or async) called before each model call.
    ``mcp_servers`` (connected ``MCPServerStdio`` / ``MCPServerStreamableHttp``) add their
    tools, listed once per run; ``mcp_config`` takes ``convert_schemas_to_strict`` and
    ``failure_error_function`` for those tools.
    ``tool_use_behavior`` says what follows a turn of tool calls (see ``sandmem.agent._tool_use``):
    another model turn by default, or a final output taken from the tools.

    ``Agent[MyContext](...)`` (the reference's generic form) is accepted and means ``Agent``:
    the context's type is not checked.
    """

    name: str
    instructions: str | InstructionsFunction | None = None
    model: str | Model | None = None
    model_settings: ModelSettings | dict[str, Any] | None = field(default_factory=ModelSettings)
    tools: list[FunctionTool] = field(default_factory=list)
    output_type: type[Any] | AgentOutputSchemaBase | None = None
    hooks: AgentHooks[Any] | None = None
    handoff_description: str | None = None
    tool_use_behavior: ToolUseBehavior = "run_llm_again"
    mcp_servers: list[MCPServer] = field(default_factory=list)
    mcp_config: dict[str, Any] = field(default_factory=dict)
    prompt: Prompt | DynamicPromptFunction | None = None

    def __class_getitem__(cls, item: Any) -> type[Self]:
        return cls

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise TypeError("Agent.name must be a non-empty string")
        if self.instructions is not None and not (
            isinstance(self.instructions, str) or callable(self.instructions)
        ):
            raise TypeError("Agent.instructions must be a string or a function (ctx, agent) -> str")
        self.model_settings = ModelSettings.coerce(self.model_settings)
        check_tool_use_behavior(self.tool_use_behavior)
        check_mcp_config(self.mcp_servers, self.mcp_config)
        if isinstance(self.prompt, dict) and not self.prompt.get("id"):
            raise UserError(
                f"agent {self.name!r}: prompt must be a dict with an 'id' (and optional "
                "'version' and 'variables'), or a function returning one"
            )

    @property
    def settings(self) -> ModelSettings:
        """``model_settings`` as a ``ModelSettings`` (it always is one after construction)."""
        return ModelSettings.coerce(self.model_settings)

    def clone(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied (lists such as ``tools`` are shared, not copied)."""
        return dataclasses.replace(self, **changes)

    async def get_instructions(self, ctx: RunContextWrapper[Any]) -> str | None:
        """The instructions for the next model call (calls a dynamic-instructions function)."""
        if self.instructions is None or isinstance(self.instructions, str):
            return self.instructions
        value = self.instructions(ctx, self)
        if inspect.isawaitable(value):
            value = await value
        if value is not None and not isinstance(value, str):
            raise TypeError(
                f"the instructions function of agent {self.name!r} returned "
                f"{type(value).__name__}, not str"
            )
        return value

    # the reference's name for the same thing
    get_system_prompt = get_instructions

    async def get_prompt(self, ctx: RunContextWrapper[Any]) -> Prompt | None:
        """The stored prompt for the next model call (calls a dynamic-prompt function)."""
        value: Any = self.prompt
        if callable(value):
            value = value(GenerateDynamicPromptData(ctx, self))
            if inspect.isawaitable(value):
                value = await value
        if value is None:
            return None
        dump = getattr(value, "model_dump", None)  # the openai package's prompt objects
        value = dump(exclude_none=True) if callable(dump) else value
        if not isinstance(value, dict) or not value.get("id"):
            raise UserError(
                f"agent {self.name!r}: prompt must be a dict with an 'id' (and optional "
                "'version' and 'variables'), or a function returning one"
            )
        return {key: v for key, v in value.items() if v is not None}

    def as_tool(
        self,
        tool_name: str | None = None,
        tool_description: str | None = None,
        custom_output_extractor: Callable[[Any], Awaitable[Any]] | None = None,
        is_enabled: bool | EnabledFunction = True,
        on_stream: Callable[[AgentToolStreamEvent], Any] | None = None,
        run_config: RunConfig | None = None,
        max_turns: int | None = None,
        hooks: RunHooks[Any] | None = None,
        failure_error_function: ToolErrorFunction | None = default_tool_error_function,
        parameters: type[Any] | None = None,
        **unsupported: Any,
    ) -> FunctionTool:
        """This agent as a tool another agent can call: each call is a nested run (its own
        turns, usage counted in the calling run, items recorded in the calling run's memory
        segment); the model gets its final output, or ``custom_output_extractor(result)``.
        ``parameters`` (a pydantic model or dataclass) replaces the single ``input`` string
        argument; the nested run's input is then the arguments as JSON."""
        from sandmem.agent._agent_tool import agent_as_tool

        ignored = {k for k, v in unsupported.items() if v not in (None, False)}
        ignored -= {"include_input_schema", "on_stream_max_pending_events"}
        if ignored:
            raise UserError(
                f"as_tool does not support {sorted(ignored)} (see docs/porting.md); leave them "
                "unset"
            )
        return agent_as_tool(
            self,
            tool_name,
            tool_description,
            custom_output_extractor=custom_output_extractor,
            is_enabled=is_enabled,
            on_stream=on_stream,
            run_config=run_config,
            max_turns=max_turns,
            hooks=hooks,
            failure_error_function=failure_error_function,
            parameters=parameters,
        )
