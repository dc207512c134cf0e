"""Lifecycle hooks: subclass and override the callbacks you need.

``RunHooks`` (passed as ``Runner.run(..., hooks=...)``) sees every agent of a run;
``AgentHooks`` (``Agent(hooks=...)``) sees one agent. Per event, the run's hook is awaited
before the agent's. Order within a run::

    on_agent_start / on_start
      on_llm_start -> on_llm_end                      (each model call)
      on_tool_start -> on_tool_end                    (each tool call of that turn)
    on_agent_end / on_end                             (only when the agent gives its final output)

A hook that raises fails the run (it is your code; sandmem does not hide its errors).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sandmem._items import Item

if TYPE_CHECKING:
    from sandmem.agent._agent import Agent
    from sandmem.agent._context import RunContextWrapper
    from sandmem.agent._tools import FunctionTool
    from sandmem.models._base import ModelResponse

TContext = TypeVar("TContext")


class RunHooks(Generic[TContext]):
    """Callbacks for every agent of one run. Every method is a no-op by default."""

    async def on_agent_start(self, context: RunContextWrapper[TContext], agent: Agent) -> None:
        """Before the agent's first model call."""

    async def on_agent_end(
        self, context: RunContextWrapper[TContext], agent: Agent, output: Any
    ) -> None:
        """After the agent produced its final output."""

    async def on_llm_start(
        self,
        context: RunContextWrapper[TContext],
        agent: Agent,
        system_prompt: str | None,
        input_items: list[Item],
    ) -> None:
        """Just before a model call: the instructions and the input items sent."""

    async def on_llm_end(
        self, context: RunContextWrapper[TContext], agent: Agent, response: ModelResponse
    ) -> None:
        """Just after a model call returned."""

    async def on_tool_start(
        self, context: RunContextWrapper[TContext], agent: Agent, tool: FunctionTool
    ) -> None:
        """Before a tool runs; ``context`` is a ``ToolContext`` naming the call."""

    async def on_tool_end(
        self, context: RunContextWrapper[TContext], agent: Agent, tool: FunctionTool, result: Any
    ) -> None:
        """After a tool ran; ``result`` is what the model is shown."""

    async def on_handoff(
        self, context: RunContextWrapper[TContext], from_agent: Agent, to_agent: Agent
    ) -> None:
        """Never called: sandmem has no handoffs yet (kept so reference subclasses load)."""


class AgentHooks(Generic[TContext]):
    """Callbacks for one agent (``Agent(hooks=...)``). Every method is a no-op by default."""

    async def on_start(self, context: RunContextWrapper[TContext], agent: Agent) -> None:
        """Before this agent's first model call."""

    async def on_end(self, context: RunContextWrapper[TContext], agent: Agent, output: Any) -> None:
        """After this agent produced its final output."""

    async def on_llm_start(
        self,
        context: RunContextWrapper[TContext],
        agent: Agent,
        system_prompt: str | None,
        input_items: list[Item],
    ) -> None:
        """Just before a model call of this agent."""

    async def on_llm_end(
        self, context: RunContextWrapper[TContext], agent: Agent, response: ModelResponse
    ) -> None:
        """Just after a model call of this agent returned."""

    async def on_tool_start(
        self, context: RunContextWrapper[TContext], agent: Agent, tool: FunctionTool
    ) -> None:
        """Before one of this agent's tools runs."""

    async def on_tool_end(
        self, context: RunContextWrapper[TContext], agent: Agent, tool: FunctionTool, result: Any
    ) -> None:
        """After one of this agent's tools ran."""

    async def on_handoff(
        self, context: RunContextWrapper[TContext], agent: Agent, source: Agent
    ) -> None:
        """Never called: sandmem has no handoffs yet (kept so reference subclasses load)."""
