"""Agent.as_tool: a sub-agent called as a tool runs as a nested run of the calling run."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from sandmem import (
    Agent,
    AgentHooks,
    Memory,
    MemoryGenerateConfig,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    function_tool,
)
from sandmem.models._base import ModelRequest, ModelResponse
from sandmem.testing import FunctionModel, InMemorySandboxClient, text, tool_call, tool_outputs


@function_tool
def lookup(word: str) -> str:
    """Look a word up."""
    return f"{word} means hello"


def _translator(**kwargs: Any) -> Agent:
    def fn(request: ModelRequest) -> Any:
        if not tool_outputs(request):
            return [tool_call("lookup", {"word": "hola"}, "inner-1")]
        return f"translated: {request.input[0]['content']}"

    return Agent(name="Translator", model=FunctionModel(fn), tools=[lookup], **kwargs)


def _orchestrator(sub_tool: Any) -> tuple[Agent, FunctionModel]:
    def fn(request: ModelRequest) -> Any:
        outputs = tool_outputs(request)
        if not outputs:
            return [tool_call(sub_tool.name, {"input": "hola"}, "outer-1")]
        return f"final: {outputs[-1]['output']}"

    model = FunctionModel(fn)
    return Agent(name="Boss", model=model, tools=[sub_tool]), model


async def test_nested_run_output_and_usage_counted_in_the_parent() -> None:
    sub = _translator()
    tool = sub.as_tool("translate", "Translate text to English.")
    assert tool.params_json_schema["required"] == ["input"]
    boss, _ = _orchestrator(tool)
    result = await Runner.run(boss, "translate hola")
    assert result.final_output == "final: translated: hola"
    # two parent model calls + two nested ones
    assert result.usage.requests == 4
    # the parent's model saw only its own items
    assert [i["type"] for i in result.new_items] == [
        "function_call",
        "function_call_output",
        "message",
    ]


async def test_custom_output_extractor_and_structured_parameters() -> None:
    class Request(BaseModel):
        text: str
        target: str

    seen: list[str] = []

    def fn(request: ModelRequest) -> str:
        seen.append(request.input[0]["content"])
        return "bonjour"

    sub = Agent(name="Translator", model=FunctionModel(fn))

    async def extract(result: Any) -> str:
        return f"<{result.final_output}> after {len(result.new_items)} item(s)"

    tool = sub.as_tool("translate", "x", custom_output_extractor=extract, parameters=Request)
    assert set(tool.params_json_schema["properties"]) == {"text", "target"}

    def boss_fn(request: ModelRequest) -> Any:
        outputs = tool_outputs(request)
        if not outputs:
            return [tool_call("translate", {"text": "hello", "target": "fr"})]
        return outputs[-1]["output"]

    result = await Runner.run(Agent(name="B", model=FunctionModel(boss_fn), tools=[tool]), "go")
    assert result.final_output == "<bonjour> after 1 item(s)"
    assert json.loads(seen[0]) == {"text": "hello", "target": "fr"}


async def test_nested_max_turns_becomes_a_tool_error() -> None:
    looping = Agent(
        name="Looper",
        model=FunctionModel(lambda r: [tool_call("lookup", {"word": "x"})]),
        tools=[lookup],
    )
    boss, _ = _orchestrator(looping.as_tool("loop", "Loops.", max_turns=2))
    result = await Runner.run(boss, "go")
    assert result.final_output.startswith("final: Error: MaxTurnsExceeded")
    assert "max_turns=2" in result.final_output
    assert result.usage.requests == 2 + 2


async def test_hooks_of_the_nested_run_and_of_the_sub_agent() -> None:
    log: list[str] = []

    class Nested(RunHooks[Any]):
        async def on_agent_start(self, context: RunContextWrapper[Any], agent: Agent) -> None:
            log.append(f"nested start {agent.name} ctx={context.context}")

        async def on_llm_end(
            self, context: RunContextWrapper[Any], agent: Agent, response: ModelResponse
        ) -> None:
            log.append(f"nested llm {agent.name}")

    class Own(AgentHooks[Any]):
        async def on_end(self, context: RunContextWrapper[Any], agent: Agent, output: Any) -> None:
            log.append(f"sub end {output}")

    class Outer(RunHooks[Any]):
        async def on_tool_end(
            self, context: RunContextWrapper[Any], agent: Agent, tool: Any, result: Any
        ) -> None:
            log.append(f"outer tool {tool.name}")

    sub = _translator(hooks=Own())
    boss, _ = _orchestrator(sub.as_tool("translate", "x", hooks=Nested()))
    await Runner.run(boss, "go", context="C", hooks=Outer())
    # the calling run's hooks see the agent tool, not the nested run's own tool calls
    assert log == [
        "nested start Translator ctx=C",
        "nested llm Translator",
        "nested llm Translator",
        "sub end translated: hola",
        "outer tool translate",
    ]


async def test_on_stream_receives_the_nested_runs_events() -> None:
    events: list[tuple[str, str]] = []

    async def on_stream(payload: Any) -> None:
        call = payload["tool_call"]
        events.append((payload["event"].type, call["call_id"] if call else ""))

    boss, _ = _orchestrator(_translator().as_tool("translate", "x", on_stream=on_stream))
    result = await Runner.run(boss, "go")
    assert result.final_output == "final: translated: hola"
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "agent_updated_stream_event"
    assert "run_item_stream_event" in kinds and "raw_response_event" in kinds
    assert {call for _, call in events} == {"outer-1"}


async def test_nested_items_are_recorded_in_the_parents_memory_segment() -> None:
    generate = MemoryGenerateConfig(
        phase_one_model=FunctionModel(lambda r: "unused"),
        phase_two_model=FunctionModel(lambda r: "unused"),
    )
    sub_tool = _translator().as_tool("translate", "x")

    def fn(request: ModelRequest) -> Any:
        outputs = tool_outputs(request)
        if not outputs:
            return [text("asking"), tool_call("translate", {"input": "hola"}, "outer-1")]
        return "done"

    parent = SandboxAgent(
        name="Boss",
        model=FunctionModel(fn),
        tools=[sub_tool],
        capabilities=[Memory(read=None, generate=generate)],
    )
    session = await InMemorySandboxClient().create()
    await session.start()
    await Runner.run(
        parent,
        "go",
        conversation_id="conv-1",
        run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
    )
    line = (await session.read("sessions/conv-1.jsonl")).read().decode().strip()
    segment = json.loads(line)
    shapes = [
        (i.get("type"), i.get("call_id") or i.get("name") or i.get("content"))
        for i in segment["generated_items"]
    ]
    assert shapes == [
        ("message", "asking"),
        ("function_call", "outer-1"),
        ("function_call", "inner-1"),
        ("function_call_output", "inner-1"),
        ("message", "translated: hola"),
        ("function_call_output", "outer-1"),
        ("message", "done"),
    ]


def test_unsupported_options_are_refused() -> None:
    with pytest.raises(Exception, match="does not support"):
        _translator().as_tool("t", "x", needs_approval=True)
