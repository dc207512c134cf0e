"""Reference-shaped forms that programs written for the reference SDK use: the ``tool``
decorator, tool timeouts, generic agents, ``Capability(type=...)``, ``openai_client=``, and
every way of cancelling a streamed run ending its event stream."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from sandmem import (
    Agent,
    Capability,
    RunContextWrapper,
    Runner,
    SandboxAgent,
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


def test_generic_agents_subscript() -> None:
    assert Agent[Ctx](name="a").name == "a"
    assert isinstance(SandboxAgent[Ctx](name="s"), Agent)


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


def test_capability_accepts_its_type_name() -> None:
    class Notes(Capability):
        greeting: str = "hi"

    cap = Notes(type="notes", greeting="hello")
    assert (cap.type, cap.greeting) == ("notes", "hello")
    assert Capability(type="plain").type == "plain"
    with pytest.raises(TypeError, match="unexpected fields"):
        Notes(colour="red")


def test_openai_models_take_openai_client() -> None:
    from openai import AsyncOpenAI

    from sandmem.models import OpenAIChatCompletionsModel, OpenAIResponsesModel

    client = AsyncOpenAI(api_key="test", base_url="http://127.0.0.1:9/v1")
    for cls in (OpenAIChatCompletionsModel, OpenAIResponsesModel):
        model = cls(model="m", openai_client=client)
        assert model.name == "m"
        with pytest.raises(UserError, match="needs a client"):
            cls(model="m")


async def _never(request: ModelRequest) -> str:
    await asyncio.Event().wait()
    return "never"


@pytest.mark.parametrize(
    "modes",
    [["immediate"], ["after_turn", "immediate"], ["immediate", "immediate"]],
)
async def test_cancel_before_iterating_ends_the_stream(modes: list[str]) -> None:
    result = Runner.run_streamed(Agent(name="a", model=FunctionModel(_never)), "go")
    for mode in modes:
        result.cancel(mode)  # type: ignore[arg-type]

    async def drain() -> list[Any]:
        return [event async for event in result.stream_events()]

    await asyncio.wait_for(drain(), 5)
    assert result.is_complete


async def test_after_turn_then_immediate_while_streaming_ends_the_stream() -> None:
    started = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    result = Runner.run_streamed(Agent(name="a", model=FunctionModel(slow)), "go")

    async def drain() -> None:
        async for _ in result.stream_events():
            pass

    consumer = asyncio.create_task(drain())
    await asyncio.wait_for(started.wait(), 5)
    result.cancel("after_turn")
    result.cancel("immediate")
    await asyncio.wait_for(consumer, 5)
    assert result.is_complete
    result.cancel("immediate")  # a finished run ignores further cancels


def test_reference_type_names_are_aliases() -> None:
    import sandmem

    assert sandmem.AgentBase is Agent
    assert sandmem.AgentHookContext is RunContextWrapper
    assert sandmem.Tool is sandmem.FunctionTool
