"""Agent.tool_use_behavior: what follows a turn of tool calls (the reference's four forms)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from sandmem import Agent, Runner, function_tool
from sandmem.agent._tool_use import FunctionToolResult, ToolsToFinalOutputResult
from sandmem.models import ModelRequest
from sandmem.testing import FunctionModel, text, tool_call, tool_outputs


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@function_tool
def note(message: str) -> str:
    """Keep a note."""
    return f"noted: {message}"


def _script(request: ModelRequest) -> list[dict[str, Any]]:
    """Turn 1: add and note in parallel; turn 2: note; turn 3: a final message."""
    done = len(tool_outputs(request))
    if done == 0:
        return [tool_call("add", {"a": 1, "b": 2}), tool_call("note", {"message": "a"})]
    if done == 2:
        return [tool_call("note", {"message": "b"})]
    return [text("all done")]


async def _run(behavior: Any) -> tuple[Any, int]:
    model = FunctionModel(_script)
    agent = Agent(name="a", model=model, tools=[add, note], tool_use_behavior=behavior)
    result = await Runner.run(agent, "go")
    return result.final_output, len(model.requests)


async def test_default_asks_the_model_again_after_tools() -> None:
    assert await _run("run_llm_again") == ("all done", 3)


async def test_stop_on_first_tool_returns_the_first_tools_output() -> None:
    # the tool's own value (an int here), as in the reference; the model would have seen "3"
    assert await _run("stop_on_first_tool") == (3, 1)


async def test_stop_at_tool_names_stops_only_when_one_of_them_ran() -> None:
    assert await _run({"stop_at_tool_names": ["note"]}) == ("noted: a", 1)
    assert await _run({"stop_at_tool_names": ["missing"]}) == ("all done", 3)


async def test_a_function_decides_from_the_turns_results() -> None:
    seen: list[list[str]] = []

    async def decide(ctx: Any, results: list[FunctionToolResult]) -> ToolsToFinalOutputResult:
        seen.append([r.tool.name for r in results])
        outputs = [r.output for r in results]
        return ToolsToFinalOutputResult("noted: b" in outputs, final_output="stopped")

    assert await _run(decide) == ("stopped", 2)
    assert seen == [["add", "note"], ["note"]]


def test_other_values_are_refused() -> None:
    with pytest.raises(TypeError, match="tool_use_behavior"):
        Agent(name="a", tool_use_behavior="stop")  # type: ignore[arg-type]


class Weather(BaseModel):
    city: str


@function_tool
def weather(city: str) -> Weather:
    """The weather."""
    return Weather(city=city)


async def test_results_carry_the_tools_own_value() -> None:
    async def decide(ctx: Any, results: list[FunctionToolResult]) -> ToolsToFinalOutputResult:
        value = results[0].output
        assert isinstance(value, Weather)
        # the model-facing item holds the JSON text
        assert results[0].run_item["output"] == '{"city":"Oslo"}'
        return ToolsToFinalOutputResult(True, f"in {value.city}")

    model = FunctionModel(lambda r: [tool_call("weather", {"city": "Oslo"})])
    agent = Agent(name="a", model=model, tools=[weather], tool_use_behavior=decide)
    assert (await Runner.run(agent, "go")).final_output == "in Oslo"
