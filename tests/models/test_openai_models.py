"""Both OpenAI models through the real ``openai`` client against the local fake server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest
from openai import AsyncOpenAI
from pydantic import BaseModel

from sandmem._errors import ModelRequestError, UserError
from sandmem._settings import ModelSettings
from sandmem.agent._schema import output_schema_for, parse_structured_output
from sandmem.models import (
    Model,
    ModelRequest,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    ToolSpec,
)

WEATHER_TOOL = ToolSpec(
    name="get_weather",
    description="Weather for a city.",
    params_json_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)

TWO_CALLS = [
    ("get_weather", {"city": "Oslo"}, "call_a"),
    ("get_weather", {"city": "Lima"}, "call_b"),
]


class Forecast(BaseModel):
    city: str
    celsius: float
    note: str | None


@pytest.fixture(params=["responses", "chat"])
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def client(fake_openai: FakeOpenAIServer) -> AsyncIterator[AsyncOpenAI]:
    client = AsyncOpenAI(api_key="test-key", base_url=fake_openai.base_url, max_retries=2)
    yield client
    await client.close()


def make_model(api: str, client: AsyncOpenAI, name: str = "test-model") -> Model:
    if api == "responses":
        return OpenAIResponsesModel(name, client)
    return OpenAIChatCompletionsModel(name, client)


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


async def test_two_tool_calls_in_one_reply(
    api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = lambda req: FakeReply(
        tool_calls=list(TWO_CALLS), input_tokens=42, output_tokens=7
    )
    model = make_model(api, client)

    response = await model.get_response(
        ModelRequest("Be brief.", [user("Weather in Oslo and Lima?")], tools=[WEATHER_TOOL])
    )

    assert response.output == [
        {
            "type": "function_call",
            "call_id": "call_a",
            "name": "get_weather",
            "arguments": '{"city": "Oslo"}',
        },
        {
            "type": "function_call",
            "call_id": "call_b",
            "name": "get_weather",
            "arguments": '{"city": "Lima"}',
        },
    ]
    assert (response.usage.requests, response.usage.input_tokens) == (1, 42)
    assert response.usage.output_tokens == 7
    assert response.response_id
    [req] = fake_openai.requests
    assert req.api == api
    assert req.model == "test-model"
    assert req.instructions == "Be brief."
    assert req.last_user_text() == "Weather in Oslo and Lima?"
    assert req.tool_names() == ["get_weather"]
    assert req.tools()[0]["parameters"] == WEATHER_TOOL.params_json_schema


async def test_text_reply(api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer) -> None:
    model = make_model(api, client)
    response = await model.get_response(ModelRequest(None, [user("hello")]))
    assert response.output == [{"type": "message", "role": "assistant", "content": "echo: hello"}]
    assert fake_openai.requests[0].instructions is None


async def test_tool_outputs_are_sent_back_with_their_ids(
    api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = lambda req: FakeReply(tool_calls=list(TWO_CALLS))
    model = make_model(api, client)
    first = await model.get_response(ModelRequest(None, [user("go")], tools=[WEATHER_TOOL]))
    transcript = [
        user("go"),
        *first.output,
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_b", "output": "rain"},
    ]
    fake_openai.handler = lambda req: FakeReply(text="Oslo sunny, Lima rain.")

    second = await model.get_response(ModelRequest(None, transcript, tools=[WEATHER_TOOL]))

    assert second.output[0]["content"] == "Oslo sunny, Lima rain."
    req = fake_openai.requests[-1]
    assert req.tool_outputs() == {"call_a": "sunny", "call_b": "rain"}
    assert req.tool_calls() == [
        ("get_weather", '{"city": "Oslo"}', "call_a"),
        ("get_weather", '{"city": "Lima"}', "call_b"),
    ]


async def test_structured_output_carries_strict_schema(
    api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer
) -> None:
    def handler(req: FakeRequest) -> FakeReply:
        assert req.wants_json()
        return FakeReply.json({"city": "Oslo", "celsius": 4.5, "note": None})

    fake_openai.handler = handler
    schema = output_schema_for(Forecast)
    model = make_model(api, client)

    response = await model.get_response(
        ModelRequest(None, [user("forecast")], output_schema=schema)
    )

    sent = fake_openai.requests[0].json_schema()
    assert sent == {"name": "Forecast", "schema": schema.json_schema, "strict": True}
    assert sent["schema"]["additionalProperties"] is False
    assert sent["schema"]["required"] == ["city", "celsius", "note"]
    forecast = parse_structured_output(Forecast, response.output[0]["content"])
    assert forecast == Forecast(city="Oslo", celsius=4.5, note=None)


async def test_500_then_success_is_retried_by_the_client(
    api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.inject(status=500)
    model = make_model(api, client)
    response = await model.get_response(ModelRequest(None, [user("again")]))
    assert response.output[0]["content"] == "echo: again"
    assert len(fake_openai.requests) == 2


async def test_500_with_the_clients_own_backoff(fake_openai: FakeOpenAIServer) -> None:
    # no Retry-After from the server: the openai client sleeps ~0.4-0.5 s before retrying
    fake_openai.inject(status=503, retry_after_s=None)
    async with AsyncOpenAI(api_key="k", base_url=fake_openai.base_url, max_retries=1) as client:
        response = await OpenAIResponsesModel("m", client).get_response(
            ModelRequest(None, [user("x")])
        )
    assert response.output[0]["content"] == "echo: x"
    assert len(fake_openai.requests) == 2


async def test_429_exhausted_is_a_retryable_request_error(
    api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.inject(status=429, times=10)
    model = make_model(api, client)
    with pytest.raises(ModelRequestError) as info:
        await model.get_response(ModelRequest(None, [user("x")]))
    assert info.value.status_code == 429
    assert info.value.retryable is True
    assert "429" in str(info.value)
    assert len(fake_openai.requests) == 3  # first try + max_retries=2


@pytest.mark.parametrize("retries", [0, 4])
async def test_model_settings_retry_sets_the_retry_count_of_a_request(
    api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer, retries: int
) -> None:
    # the client allows 2 retries; the settings' count wins for this request only
    fake_openai.inject(status=429, times=10)
    settings = ModelSettings(retry={"max_retries": retries})
    with pytest.raises(ModelRequestError):
        await make_model(api, client).get_response(
            ModelRequest(None, [user("x")], settings=settings)
        )
    assert len(fake_openai.requests) == 1 + retries
    assert client.max_retries == 2


async def test_400_is_not_retryable(
    api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.inject(status=400)
    with pytest.raises(ModelRequestError) as info:
        await make_model(api, client).get_response(ModelRequest(None, [user("x")]))
    assert (info.value.status_code, info.value.retryable) == (400, False)
    assert len(fake_openai.requests) == 1


async def test_timeout_is_a_retryable_request_error(
    api: str, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.inject(delay_s=1.0)
    async with AsyncOpenAI(
        api_key="k", base_url=fake_openai.base_url, max_retries=0, timeout=0.2
    ) as client:
        with pytest.raises(ModelRequestError) as info:
            await make_model(api, client).get_response(ModelRequest(None, [user("x")]))
    assert info.value.retryable is True
    assert info.value.status_code is None
    assert "timed out" in str(info.value)


async def test_malformed_body_is_a_request_error(
    api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.inject(malformed=True)
    with pytest.raises(ModelRequestError, match="not valid JSON"):
        await make_model(api, client).get_response(ModelRequest(None, [user("x")]))


async def test_unreachable_server_is_a_retryable_request_error(api: str) -> None:
    with FakeOpenAIServer() as server:
        base_url = server.base_url
    async with AsyncOpenAI(api_key="k", base_url=base_url, max_retries=0) as client:
        with pytest.raises(ModelRequestError) as info:
            await make_model(api, client).get_response(ModelRequest(None, [user("x")]))
    assert info.value.retryable is True
    assert "OPENAI_BASE_URL" in str(info.value)


async def test_reasoning_is_kept_but_not_sent_back(
    api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = lambda req: FakeReply(text="done", reasoning="thinking it over")
    model = make_model(api, client)
    first = await model.get_response(ModelRequest(None, [user("q")]))
    [reasoning, message] = first.output
    assert reasoning["type"] == "reasoning"
    assert reasoning["summary"][0]["text"] == "thinking it over"
    assert message == {"type": "message", "role": "assistant", "content": "done"}

    await model.get_response(ModelRequest(None, [user("q"), *first.output, user("more")]))
    sent = json.dumps(fake_openai.requests[-1].body)
    assert "thinking it over" not in sent
    assert "done" in sent


async def test_settings_reach_the_request(
    api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer
) -> None:
    settings = ModelSettings(
        temperature=0.2,
        max_tokens=321,
        reasoning={"effort": "low"},
        tool_choice="get_weather",
        extra_args={"seed": 7, "extra_body": {"top_p": 0.5}, "extra_headers": {"x-test": "1"}},
    )
    model = make_model(api, client)
    await model.get_response(
        ModelRequest(None, [user("x")], tools=[WEATHER_TOOL], settings=settings)
    )
    req = fake_openai.requests[0]
    body = req.body
    assert body["temperature"] == 0.2
    assert (body["seed"], body["top_p"]) == (7, 0.5)
    assert req.headers.get("x-test") == "1"
    if api == "responses":
        assert body["max_output_tokens"] == 321
        assert body["reasoning"] == {"effort": "low"}
        assert body["tool_choice"] == {"type": "function", "name": "get_weather"}
        assert body["store"] is False
    else:
        assert body["max_completion_tokens"] == 321
        assert body["reasoning_effort"] == "low"
        assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
        assert "max_tokens" not in body


async def test_image_tool_output(
    api: str, client: AsyncOpenAI, fake_openai: FakeOpenAIServer
) -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
    output = [{"type": "input_text", "text": "a chart"}, image]
    transcript = [
        user("look"),
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": output},
    ]
    await make_model(api, client).get_response(ModelRequest(None, transcript))
    items = fake_openai.requests[0].items
    if api == "responses":
        assert items[-1] == {"type": "function_call_output", "call_id": "c1", "output": output}
        return
    assert [m["role"] for m in items] == ["user", "assistant", "tool", "user"]
    assert items[2]["tool_call_id"] == "c1"
    assert items[2]["content"].startswith("a chart")
    assert items[3]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    ]


def test_openai_models_take_openai_client() -> None:
    from openai import AsyncOpenAI

    from sandmem.models import OpenAIChatCompletionsModel, OpenAIResponsesModel

    client = AsyncOpenAI(api_key="test", base_url="http://127.0.0.1:9/v1")
    for cls in (OpenAIChatCompletionsModel, OpenAIResponsesModel):
        model = cls(model="m", openai_client=client)
        assert model.name == "m"
        with pytest.raises(UserError, match="needs a client"):
            cls(model="m")
