"""OpenAIProvider: env resolution, lazy clients, and requests through the fake server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fake_openai import FakeOpenAIServer

from sandmem._errors import ModelRequestError, UserError
from sandmem.models import (
    ModelRequest,
    OpenAIChatCompletionsModel,
    OpenAIProvider,
    OpenAIResponsesModel,
)

HELLO = ModelRequest(None, [{"role": "user", "content": "hello"}])


def test_default_api_and_model() -> None:
    model = OpenAIProvider().get_model(None)
    assert isinstance(model, OpenAIResponsesModel)
    assert model.name == "gpt-5.4-mini"


def test_env_selects_api_and_default_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDMEM_OPENAI_API", "chat_completions")
    monkeypatch.setenv("SANDMEM_MODEL", "qwen3:4b")
    provider = OpenAIProvider()
    model = provider.get_model(None)
    assert isinstance(model, OpenAIChatCompletionsModel)
    assert model.name == "qwen3:4b"
    assert provider.get_model("llama3").name == "llama3"


def test_api_argument_wins_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDMEM_OPENAI_API", "chat_completions")
    assert isinstance(OpenAIProvider(api="responses").get_model("m"), OpenAIResponsesModel)


def test_bad_api_env_names_the_allowed_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDMEM_OPENAI_API", "completions")
    with pytest.raises(UserError) as info:
        OpenAIProvider().get_model("m")
    message = str(info.value)
    assert "SANDMEM_OPENAI_API" in message
    assert "'responses'" in message and "'chat_completions'" in message
    assert "'completions'" in message


def test_bad_arguments() -> None:
    with pytest.raises(UserError, match="chat_completions"):
        OpenAIProvider(api="chat")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="timeout"):
        OpenAIProvider(timeout=0)
    with pytest.raises(UserError, match="max_retries"):
        OpenAIProvider(max_retries=-1)


async def test_no_key_and_no_base_url_fails_at_request_time() -> None:
    model = OpenAIProvider().get_model("m")  # building the model needs no configuration
    with pytest.raises(UserError) as info:
        await model.get_response(HELLO)
    assert "OPENAI_API_KEY" in str(info.value)
    assert "OPENAI_BASE_URL" in str(info.value)


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_base_url_from_env_needs_no_key(
    api: str, fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("SANDMEM_OPENAI_API", api)
    provider = OpenAIProvider()
    response = await provider.get_model("local").get_response(HELLO)
    await provider.aclose()
    assert response.output[0]["content"] == "echo: hello"
    [req] = fake_openai.requests
    assert req.api == ("responses" if api == "responses" else "chat")
    assert req.headers["authorization"] == "Bearer sandmem-no-key"


async def test_explicit_arguments_win(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    provider = OpenAIProvider(api_key="from-arg", base_url=fake_openai.base_url)
    await provider.get_model("m").get_response(HELLO)
    await provider.aclose()
    assert fake_openai.requests[0].headers["authorization"] == "Bearer from-arg"


async def test_one_client_per_event_loop_with_settings(fake_openai: FakeOpenAIServer) -> None:
    provider = OpenAIProvider(base_url=fake_openai.base_url, timeout=7.5, max_retries=1)
    client = provider._client()
    assert provider._client() is client
    assert client.max_retries == 1
    assert client.timeout == 7.5
    await provider.aclose()


def test_a_new_event_loop_gets_a_new_client(fake_openai: FakeOpenAIServer) -> None:
    provider = OpenAIProvider(base_url=fake_openai.base_url)
    model = provider.get_model("m")
    seen = []

    async def one_run() -> None:
        seen.append(provider._client())
        await model.get_response(HELLO)
        await provider.aclose()

    asyncio.run(one_run())
    asyncio.run(one_run())
    assert seen[0] is not seen[1]
    assert len(fake_openai.requests) == 2


async def test_provider_retries_then_reports(fake_openai: FakeOpenAIServer) -> None:
    provider = OpenAIProvider(base_url=fake_openai.base_url, max_retries=1)
    fake_openai.inject(status=502, times=5)
    with pytest.raises(ModelRequestError) as info:
        await provider.get_model("m").get_response(HELLO)
    await provider.aclose()
    assert (info.value.status_code, info.value.retryable) == (502, True)
    assert len(fake_openai.requests) == 2


async def test_models_share_one_client_created_off_the_event_loop(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    provider = OpenAIProvider(base_url=fake_openai.base_url)
    built_in: list[threading.Thread] = []
    new_client = provider._new_client

    def recording(key: tuple[str | None, str | None]) -> object:
        built_in.append(threading.current_thread())
        return new_client(key)

    monkeypatch.setattr(provider, "_new_client", recording)
    first, second = provider.get_model("a"), provider.get_model("b")
    await asyncio.gather(*(m.get_response(HELLO) for m in (first, second, first)))
    assert len(built_in) == 1, "concurrent first requests share one client creation"
    assert built_in[0] is not threading.current_thread()
    assert await provider.client() is provider._client()
    assert len(fake_openai.requests) == 3
    await provider.aclose()


def test_a_loops_client_is_closed_when_the_loop_shuts_down(
    fake_openai: FakeOpenAIServer,
) -> None:
    provider = OpenAIProvider(base_url=fake_openai.base_url)
    clients = []

    async def one_run() -> None:
        await provider.get_model("m").get_response(HELLO)
        clients.append(await provider.client())  # no aclose(): asyncio.run's shutdown closes it

    asyncio.run(one_run())
    assert clients[0].is_closed()


async def test_a_changed_environment_gets_its_own_client(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = OpenAIProvider()
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    first = await provider.client()
    assert await provider.client() is first
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url + "/")
    assert await provider.client() is not first
    await provider.aclose()
    assert first.is_closed()


async def test_runs_and_flushes_without_a_provider_share_the_default_ones_client(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from sandmem import Agent, Runner
    from sandmem.memory import MemoryGenerateConfig
    from sandmem.memory.generation._attach import get_manager
    from sandmem.memory.layout import MemoryPaths
    from sandmem.models._provider import default_provider
    from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    provider = default_provider()
    assert provider is default_provider()
    created: list[object] = []
    new_client = provider._new_client

    def counting(key: tuple[str | None, str | None]) -> object:
        created.append(key)
        return new_client(key)

    monkeypatch.setattr(provider, "_new_client", counting)
    agent = Agent(name="a", model="m")
    for _ in range(3):
        assert (await Runner.run(agent, "hi")).final_output == "echo: hi"
    assert len(created) == 1
    client = await provider.client()
    assert not client.is_closed(), "a run does not close the shared client"
    sandbox_client = UnixLocalSandboxClient()
    session = await sandbox_client.create(manifest=Manifest(root=tmp_path / "ws"))
    manager = get_manager(session, MemoryPaths("memories", "sessions"), MemoryGenerateConfig())
    assert manager._provider() is provider
    await sandbox_client.delete(session)


def test_raw_body_call_sends_every_body_field_through_extra_body() -> None:
    """Body fields skip the openai client's per-field transform (slow on long transcripts, on
    the event loop) by travelling in ``extra_body``; the JSON body sent is unchanged."""
    from sandmem.models._openai_common import raw_body_call

    kwargs = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "temperature": 0.5,
        "timeout": 3.0,
        "extra_headers": {"h": "1"},
        "extra_body": {"temperature": 0.1, "custom": True},
    }
    call = raw_body_call(kwargs, required=("messages",))
    assert call == {
        "model": "m",
        "timeout": 3.0,
        "extra_headers": {"h": "1"},
        "messages": [],
        "extra_body": {
            "messages": [{"role": "user", "content": "x"}],
            "temperature": 0.1,
            "custom": True,
        },
    }


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_a_long_history_reaches_the_server_whole(
    api: str, fake_openai: FakeOpenAIServer
) -> None:
    history: list[dict[str, object]] = [{"role": "user", "content": "start"}]
    for i in range(200):
        history.append(
            {"type": "function_call", "call_id": f"c{i}", "name": "ls", "arguments": "{}"}
        )
        history.append({"type": "function_call_output", "call_id": f"c{i}", "output": f"o{i}"})
    history.append({"role": "user", "content": "hello"})
    provider = OpenAIProvider(base_url=fake_openai.base_url, api=api)  # type: ignore[arg-type]
    request = ModelRequest("be brief", history)
    response = await provider.get_model("m").get_response(request)
    await provider.aclose()
    assert response.output[0]["content"] == "echo: hello"
    [req] = fake_openai.requests
    assert req.instructions == "be brief"
    assert len(req.tool_outputs()) == 200
    assert [name for name, _, _ in req.tool_calls()] == ["ls"] * 200


async def test_get_model_starts_creating_the_client_in_the_background(
    fake_openai: FakeOpenAIServer,
) -> None:
    provider = OpenAIProvider(base_url=fake_openai.base_url)
    model = provider.get_model("m")  # a run asks for its model before preparing the rest
    slot = provider._loops[asyncio.get_running_loop()]
    [creating] = slot.creating.values()
    client = await creating
    await model.get_response(HELLO)
    assert await provider.client() is client, "the first request used the early client"
    await provider.aclose()


def test_get_model_outside_a_loop_or_unconfigured_creates_nothing() -> None:
    provider = OpenAIProvider()
    provider.get_model("m")  # no loop: nothing to start
    assert not provider._loops

    async def unconfigured() -> None:
        provider.get_model("m")  # no key and no base URL: the first request says so
        assert not any(slot.creating for slot in provider._loops.values())

    asyncio.run(unconfigured())
