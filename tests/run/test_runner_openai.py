"""Full runs through ``Runner`` with the real ``openai`` client and the fake server, both APIs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest
from pydantic import BaseModel

from sandmem import Agent, ModelRequestError, RunConfig, Runner, function_tool
from sandmem.models import OpenAIProvider


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return {"Oslo": "4C, snow", "Lima": "19C, cloudy"}[city]


class Trip(BaseModel):
    city: str
    days: int
    pack: list[str]


@pytest.fixture(params=["responses", "chat_completions"])
async def provider(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAIServer
) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(base_url=fake_openai.base_url, api=request.param, max_retries=2)
    yield provider
    await provider.aclose()


async def test_two_tool_calls_then_answer(
    provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    def handler(req: FakeRequest) -> FakeReply:
        outputs = req.tool_outputs()
        if not outputs:
            return FakeReply(
                tool_calls=[
                    ("get_weather", {"city": "Oslo"}, "call_oslo"),
                    ("get_weather", {"city": "Lima"}, "call_lima"),
                ],
                input_tokens=100,
                output_tokens=20,
            )
        answer = f"Oslo: {outputs['call_oslo']}; Lima: {outputs['call_lima']}"
        return FakeReply(text=answer, input_tokens=150, output_tokens=30)

    fake_openai.handler = handler
    agent = Agent("weather", instructions="Answer briefly.", tools=[get_weather])

    result = await Runner.run(
        agent,
        "Weather in Oslo and Lima?",
        run_config=RunConfig(model="fake-model", model_provider=provider),
    )

    assert result.final_output == "Oslo: 4C, snow; Lima: 19C, cloudy"
    assert [item.get("type") for item in result.new_items] == [
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
    ]
    assert (result.usage.requests, result.usage.input_tokens, result.usage.output_tokens) == (
        2,
        250,
        50,
    )
    first, second = fake_openai.requests
    assert first.instructions == "Answer briefly."
    assert first.tool_names() == second.tool_names() == ["get_weather"]
    assert second.tool_calls() == [
        ("get_weather", '{"city": "Oslo"}', "call_oslo"),
        ("get_weather", '{"city": "Lima"}', "call_lima"),
    ]
    assert second.model == "fake-model"


async def test_structured_output(provider: OpenAIProvider, fake_openai: FakeOpenAIServer) -> None:
    def handler(req: FakeRequest) -> FakeReply:
        schema = req.json_schema()
        assert schema is not None and schema["strict"] is True
        assert schema["schema"]["required"] == ["city", "days", "pack"]
        return FakeReply.json({"city": "Oslo", "days": 3, "pack": ["boots", "scarf"]})

    fake_openai.handler = handler
    agent = Agent("planner", output_type=Trip)

    result = await Runner.run(agent, "Plan Oslo", run_config=RunConfig(model_provider=provider))

    assert result.final_output == Trip(city="Oslo", days=3, pack=["boots", "scarf"])
    assert result.final_output_as(Trip, raise_if_incorrect_type=True).days == 3
    assert fake_openai.requests[0].model == "gpt-5.4-mini"


async def test_retry_after_500(provider: OpenAIProvider, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.inject(status=500)
    result = await Runner.run(Agent("a"), "ping", run_config=RunConfig(model_provider=provider))
    assert result.final_output == "echo: ping"
    assert len(fake_openai.requests) == 2
    assert result.usage.requests == 1


async def test_exhausted_retries_fail_the_run(
    provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.inject(status=503, times=3)
    with pytest.raises(ModelRequestError) as info:
        await Runner.run(Agent("a"), "ping", run_config=RunConfig(model_provider=provider))
    assert (info.value.status_code, info.value.retryable) == (503, True)


async def test_default_provider_from_env(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("SANDMEM_OPENAI_API", "chat_completions")
    monkeypatch.setenv("SANDMEM_MODEL", "local-model")
    result = await Runner.run(Agent("a"), "hi")
    assert result.final_output == "echo: hi"
    [req] = fake_openai.requests
    assert (req.api, req.model) == ("chat", "local-model")
    assert json.dumps(req.body["messages"][-1]) == '{"role": "user", "content": "hi"}'
