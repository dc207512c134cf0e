"""ModelSettings: the reference's fields, resolve(), and what arrives at each API."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem import Agent, ModelSettings, Reasoning, RunConfig, Runner, function_tool
from sandmem.models import OpenAIProvider

FULL = ModelSettings(
    temperature=0.2,
    top_p=0.9,
    frequency_penalty=0.1,
    presence_penalty=0.3,
    tool_choice="auto",
    parallel_tool_calls=False,
    truncation="auto",
    max_tokens=321,
    reasoning={"effort": "low", "summary": "concise"},
    verbosity="low",
    metadata={"team": "qa"},
    store=True,
    top_logprobs=2,
    response_include=["reasoning.encrypted_content"],
    extra_headers={"x-trace": "abc"},
    extra_query={"region": "eu"},
    extra_body={"custom_flag": True},
    extra_args={"service_tier": "flex"},
)


@function_tool
def noop() -> str:
    """Does nothing."""
    return ""


@pytest.fixture(params=["responses", "chat_completions"])
async def provider(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAIServer
) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(base_url=fake_openai.base_url, api=request.param, max_retries=0)
    yield provider
    await provider.aclose()


@pytest.mark.parametrize("streamed", [False, True])
async def test_every_setting_arrives(
    provider: OpenAIProvider, fake_openai: FakeOpenAIServer, streamed: bool
) -> None:
    seen: list[FakeRequest] = []

    def handler(req: FakeRequest) -> FakeReply:
        seen.append(req)
        return FakeReply(text="ok")

    fake_openai.handler = handler
    agent = Agent("s", model="m", model_settings=FULL, tools=[noop])
    config = RunConfig(model_provider=provider)
    if streamed:
        result = Runner.run_streamed(agent, "hi", run_config=config)
        async for _ in result.stream_events():
            pass
    else:
        await Runner.run(agent, "hi", run_config=config)
    (req,) = seen
    body, headers = req.body, req.headers
    assert headers["x-trace"] == "abc"
    assert req.path.endswith("?region=eu")
    assert body["custom_flag"] is True
    assert body["service_tier"] == "flex"
    common = {
        "temperature": 0.2,
        "top_p": 0.9,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "metadata": {"team": "qa"},
        "store": True,
        "top_logprobs": 2,
    }
    assert {k: body.get(k) for k in common} == common
    if req.api == "responses":
        assert body["max_output_tokens"] == 321
        assert body["reasoning"] == {"effort": "low", "summary": "concise"}
        assert body["truncation"] == "auto"
        assert body["text"] == {"verbosity": "low"}
        assert body["include"] == ["reasoning.encrypted_content", "message.output_text.logprobs"]
        assert "frequency_penalty" not in body  # the Responses API has none
    else:
        assert body["max_completion_tokens"] == 321
        assert body["reasoning_effort"] == "low"
        assert body["frequency_penalty"] == 0.1
        assert body["presence_penalty"] == 0.3
        assert body["verbosity"] == "low"
        assert body["logprobs"] is True


async def test_defaults_send_nothing_extra(
    provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    await Runner.run(Agent("s", model="m"), "hi", run_config=RunConfig(model_provider=provider))
    body = fake_openai.requests[0].body
    for key in ("temperature", "top_p", "reasoning", "metadata", "parallel_tool_calls"):
        assert key not in body
    if fake_openai.requests[0].api == "responses":
        assert body["store"] is False  # sandmem's default: nothing kept server-side


async def test_tool_choice_by_name(provider: OpenAIProvider, fake_openai: FakeOpenAIServer) -> None:
    agent = Agent("s", model="m", tools=[noop], model_settings={"tool_choice": "noop"})
    fake_openai.handler = lambda req: FakeReply(text="ok")
    await Runner.run(agent, "hi", run_config=RunConfig(model_provider=provider))
    choice = fake_openai.requests[0].body["tool_choice"]
    assert choice["type"] == "function"
    assert (choice.get("name") or choice["function"]["name"]) == "noop"


def test_resolve_override_wins_and_extras_merge() -> None:
    base = ModelSettings(temperature=0.1, max_tokens=10, extra_args={"a": 1, "b": 2})
    override = ModelSettings(temperature=0.7, extra_args={"b": 3})
    merged = base.resolve(override)
    assert (merged.temperature, merged.max_tokens) == (0.7, 10)
    assert merged.extra_args == {"a": 1, "b": 3}
    assert base.resolve(None) is base
    assert base.resolve({"top_p": 0.5}).top_p == 0.5
    assert base.merged(override) == merged  # the earlier name


def test_reasoning_forms() -> None:
    from openai.types.shared import Reasoning as OpenAIReasoning

    assert ModelSettings(reasoning={"effort": "high"}).reasoning == Reasoning(effort="high")
    from_openai = ModelSettings(reasoning=OpenAIReasoning(effort="low", summary="auto"))
    assert from_openai.reasoning == Reasoning(effort="low", summary="auto")
    assert from_openai.reasoning is not None
    assert from_openai.reasoning.get("effort") == "low"  # dict-style read still works
    with pytest.raises(ValueError):
        ModelSettings(reasoning={"effort": "extreme"})


def test_unknown_field_refused() -> None:
    with pytest.raises(ValueError, match="not_a_setting"):
        ModelSettings(**{"not_a_setting": 1})  # type: ignore[arg-type]


def test_agent_default_and_dict_settings() -> None:
    assert Agent("a").model_settings == ModelSettings()
    agent = Agent("a", model_settings={"temperature": 0.5})
    assert isinstance(agent.model_settings, ModelSettings)
    assert agent.settings.temperature == 0.5
