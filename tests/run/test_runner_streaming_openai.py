"""Streamed runs through the real ``openai`` client and the fake server's SSE, both APIs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem import (
    Agent,
    Filesystem,
    Memory,
    ModelSettings,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    Shell,
    function_tool,
)
from sandmem.memory import MemoryGenerateConfig
from sandmem.models import OpenAIProvider
from sandmem.sandboxes import File, Manifest, UnixLocalSandboxClient


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: The city's English name.
    """
    return {"Oslo": "4C, snow"}[city]


@pytest.fixture(params=["responses", "chat_completions"])
async def provider(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAIServer
) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(base_url=fake_openai.base_url, api=request.param, max_retries=0)
    yield provider
    await provider.aclose()


def _weather_handler(req: FakeRequest) -> FakeReply:
    outputs = req.tool_outputs()
    if not outputs:
        return FakeReply(
            text="Checking.",
            tool_calls=[("get_weather", {"city": "Oslo"}, "call_oslo")],
            input_tokens=40,
            output_tokens=8,
        )
    return FakeReply(
        text=f"Oslo: {outputs['call_oslo']}.",
        chunks=["Oslo: ", "4C, ", "snow."],
        input_tokens=60,
        output_tokens=6,
    )


def _summary(event: Any) -> tuple[str, str]:
    if event.type == "raw_response_event":
        return ("raw", event.data.type)
    if event.type == "run_item_stream_event":
        return ("item", event.name)
    return ("agent", event.new_agent.name)


async def test_streamed_run_events_deltas_and_tools(
    provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = _weather_handler
    agent = Agent("weather", instructions="Be brief.", tools=[get_weather])
    config = RunConfig(model="fake-model", model_provider=provider)
    result = Runner.run_streamed(agent, "Weather in Oslo?", run_config=config)
    events = [event async for event in result.stream_events()]

    deltas = [
        e.data.delta
        for e in events
        if e.type == "raw_response_event" and e.data.type == "response.output_text.delta"
    ]
    assert deltas == ["Checking.", "Oslo: ", "4C, ", "snow."]
    semantic = [_summary(e) for e in events if e.type != "raw_response_event"]
    assert semantic == [
        ("agent", "weather"),
        ("item", "message_output_created"),
        ("item", "tool_called"),
        ("item", "tool_output"),
        ("item", "message_output_created"),
    ]
    # every text delta of a turn comes before that turn's items
    kinds = [_summary(e)[0] for e in events]
    first_item = kinds.index("item")
    assert kinds[1:first_item].count("raw") >= 1
    tool_event = next(e for e in events if _summary(e) == ("item", "tool_called"))
    assert tool_event.item.raw_item["arguments"] == '{"city": "Oslo"}'
    output_event = next(e for e in events if _summary(e) == ("item", "tool_output"))
    assert output_event.item.output == "4C, snow"

    assert result.is_complete
    assert result.final_output == "Oslo: 4C, snow."
    assert (result.usage.requests, result.usage.input_tokens, result.usage.output_tokens) == (
        2,
        100,
        14,
    )
    assert [r.stream for r in fake_openai.requests] == [True, True]
    last = result.raw_responses[-1]
    assert last.model == "fake-model"
    if fake_openai.requests[0].api == "chat":
        assert [r.finish_reasons for r in result.raw_responses] == [["tool_calls"], ["stop"]]
    second = fake_openai.requests[1]
    assert second.tool_outputs() == {"call_oslo": "4C, snow"}
    if second.api == "chat":
        assert second.body["stream_options"] == {"include_usage": True}
    tool = second.tools()[0]
    assert tool["parameters"]["properties"]["city"]["description"] == "The city's English name."
    assert tool["strict"] is True


async def test_responses_stream_passes_the_apis_own_events(
    fake_openai: FakeOpenAIServer,
) -> None:
    from openai.types.responses import ResponseCompletedEvent, ResponseTextDeltaEvent

    provider = OpenAIProvider(base_url=fake_openai.base_url, api="responses", max_retries=0)
    try:
        agent = Agent("echo", model="fake-model")
        config = RunConfig(model_provider=provider)
        result = Runner.run_streamed(agent, "hi there", run_config=config)
        raw = [e.data async for e in result.stream_events() if e.type == "raw_response_event"]
    finally:
        await provider.aclose()
    assert raw[0].type == "response.created"
    assert isinstance(raw[-1], ResponseCompletedEvent)
    assert "".join(e.delta for e in raw if isinstance(e, ResponseTextDeltaEvent)) == (
        "echo: hi there"
    )
    assert result.final_output == "echo: hi there"
    assert result.last_response_id == raw[-1].response.id


async def test_chat_stream_without_usage_chunk(fake_openai: FakeOpenAIServer) -> None:
    provider = OpenAIProvider(base_url=fake_openai.base_url, api="chat_completions", max_retries=0)
    try:
        agent = Agent("echo", model="m", model_settings=ModelSettings(include_usage=False))
        result = Runner.run_streamed(agent, "x", run_config=RunConfig(model_provider=provider))
        async for _ in result.stream_events():
            pass
    finally:
        await provider.aclose()
    assert "stream_options" not in fake_openai.requests[0].body
    assert result.final_output == "echo: x"
    assert (result.usage.requests, result.usage.input_tokens) == (1, 0)


async def test_streamed_sandbox_run_records_memory(
    provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    def handler(req: FakeRequest) -> FakeReply:
        if not req.tool_outputs():
            return FakeReply(tool_calls=[("exec_command", {"cmd": "cat notes.txt"}, "call_1")])
        return FakeReply(text="The notes say: ship on Friday.")

    fake_openai.handler = handler
    memory = Memory(
        generate=MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")
    )
    agent = SandboxAgent(
        name="dev", model="fake-model", capabilities=[memory, Filesystem(), Shell()]
    )
    client = UnixLocalSandboxClient()
    manifest = Manifest(entries={"notes.txt": File(content=b"ship on Friday\n")})
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        config = RunConfig(sandbox=SandboxRunConfig(session=sandbox), model_provider=provider)
        result = Runner.run_streamed(
            agent, "What do the notes say?", run_config=config, conversation_id="notes-1"
        )
        names = [e.name async for e in result.stream_events() if e.type == "run_item_stream_event"]
        segment = json.loads((sandbox.root / "sessions/notes-1.jsonl").read_text())
    assert names == ["tool_called", "tool_output", "message_output_created"]
    assert segment["terminal_metadata"]["terminal_state"] == "completed"
    assert segment["final_output"] == "The notes say: ship on Friday."
    assert "ship on Friday" in json.dumps(segment["generated_items"])
    assert "ship on Friday" in (sandbox.root / "memories/MEMORY.md").read_text()


async def test_server_side_state_on_the_responses_api(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.handler = _weather_handler
    provider = OpenAIProvider(base_url=fake_openai.base_url, api="responses", max_retries=0)
    agent = Agent("weather", model="m", tools=[get_weather])
    config = RunConfig(model_provider=provider)
    try:
        await Runner.run(agent, "Oslo?", run_config=config, previous_response_id="resp_prev")
        chained = list(fake_openai.requests)
        fake_openai.reset()
        await Runner.run(agent, "Oslo?", run_config=config, conversation_id="conv_abc")
        in_conversation = list(fake_openai.requests)
        fake_openai.reset()
        await Runner.run(agent, "Oslo?", run_config=config, conversation_id="ticket-42")
        plain = list(fake_openai.requests)
    finally:
        await provider.aclose()
    first, second = (r.body for r in chained)
    assert first["previous_response_id"] == "resp_prev"
    assert "store" not in first  # continuing server-side state needs stored responses
    assert [i["type"] for i in second["input"]] == ["function_call_output"]
    assert second["previous_response_id"].startswith("resp_")
    assert all(r.body["conversation"] == "conv_abc" for r in in_conversation)
    assert [i["type"] for i in in_conversation[1].body["input"]] == ["function_call_output"]
    assert all("conversation" not in r.body for r in plain)  # only a memory conversation id
    assert plain[0].body["store"] is False
