"""The ``tool`` decorator of programs written for the reference SDK (``function_tool`` by
another name) and function tools' timeouts: a tool output by default, an error function, an
exception, and the arguments refused."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from sandmem import (
    Agent,
    RunContextWrapper,
    Runner,
    ToolTimeoutError,
    UserError,
    function_tool,
    tool,
)
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel, tool_call, tool_outputs


@dataclass
class Ctx:
    user: str


def _call_then_echo(name: str) -> FunctionModel:
    def fn(request: ModelRequest) -> Any:
        outputs = tool_outputs(request)
        if not outputs:
            return [tool_call(name, {})]
        return f"tool said: {outputs[-1]['output']}"

    return FunctionModel(fn)


async def test_tool_is_function_tool() -> None:
    @tool
    def greet(ctx: RunContextWrapper[Ctx]) -> str:
        """Greet the user."""
        return f"hi {ctx.context.user}"

    agent = Agent[Ctx](name="a", model=_call_then_echo("greet"), tools=[greet])
    result = await Runner.run(agent, "go", context=Ctx("ada"))
    assert result.final_output == "tool said: hi ada"
    assert tool is function_tool


async def test_tool_timeout_becomes_a_tool_output_by_default() -> None:
    release = asyncio.Event()

    @function_tool(timeout=0.05)
    async def slow() -> str:
        """Never finishes in time."""
        await release.wait()
        return "late"

    result = await Runner.run(Agent(name="a", model=_call_then_echo("slow"), tools=[slow]), "go")
    assert result.final_output == "tool said: Tool 'slow' timed out after 0.05 seconds."


async def test_tool_timeout_error_function_and_raise_exception() -> None:
    release = asyncio.Event()

    def explain(ctx: Any, error: Exception) -> str:
        assert isinstance(error, ToolTimeoutError)
        return f"gave up on {error.tool_name}"

    @function_tool(timeout=0.05, timeout_error_function=explain)
    async def soft() -> str:
        """Slow."""
        await release.wait()
        return "late"

    @function_tool(timeout=0.05, timeout_behavior="raise_exception")
    async def hard() -> str:
        """Slow."""
        await release.wait()
        return "late"

    result = await Runner.run(Agent(name="a", model=_call_then_echo("soft"), tools=[soft]), "go")
    assert result.final_output == "tool said: gave up on soft"
    with pytest.raises(ToolTimeoutError, match=r"Tool 'hard' timed out after 0\.05 seconds"):
        await Runner.run(Agent(name="a", model=_call_then_echo("hard"), tools=[hard]), "go")


def test_tool_timeout_validation() -> None:
    def sync_fn() -> str:
        """Sync."""
        return "x"

    async def async_fn() -> str:
        """Async."""
        return "x"

    with pytest.raises(ValueError, match="only supported for async"):
        function_tool(timeout=1)(sync_fn)
    with pytest.raises(ValueError, match="above 0"):
        function_tool(timeout=0)(async_fn)
    with pytest.raises(TypeError, match="positive number"):
        function_tool(timeout="1")(async_fn)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_behavior"):
        function_tool(timeout=1, timeout_behavior="ignore")(async_fn)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="approval is not supported"):
        function_tool(needs_approval=True)(async_fn)
