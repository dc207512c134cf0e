"""Tool calls a model writes as text run when the request offered the tool (both APIs)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem import Agent, ModelSettings, RunConfig, Runner, UserError, function_tool
from sandmem.models import OpenAIProvider
from sandmem.models._text_tools import enabled, is_openai_server, recover

CALLS: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    CALLS.append(city)
    return {"Oslo": "4C, snow", "Lima": "19C, cloudy"}.get(city, "unknown")


OSLO = {"name": "get_weather", "arguments": {"city": "Oslo"}}
LIMA = {"name": "get_weather", "arguments": {"city": "Lima"}}

#: (the answer text, the cities the run's tool must have been called for)
FORMS: dict[str, tuple[str, list[str]]] = {
    "fenced json": (f"```json\n{json.dumps(OSLO)}\n```", ["Oslo"]),
    "fence, no language, prose around": (
        f"I will look it up.\n```\n{json.dumps(OSLO)}\n```\nOne moment.",
        ["Oslo"],
    ),
    "tool_call tags": (
        f"<tool_call>\n{json.dumps(OSLO)}\n</tool_call>\n<tool_call>{json.dumps(LIMA)}</tool_call>",
        ["Oslo", "Lima"],
    ),
    "unclosed tag": (f"<tool_call>\n{json.dumps(LIMA)}", ["Lima"]),
    "bare object": (json.dumps(OSLO), ["Oslo"]),
    "a list": (json.dumps([OSLO, LIMA]), ["Oslo", "Lima"]),
    "arguments as a JSON string": (
        json.dumps({"name": "get_weather", "arguments": json.dumps({"city": "Lima"})}),
        ["Lima"],
    ),
    "parameters key": (
        json.dumps({"name": "get_weather", "parameters": {"city": "Oslo"}}),
        ["Oslo"],
    ),
    "function wrapper": (
        json.dumps(
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
        ),
        ["Oslo"],
    ),
}


@pytest.fixture(params=["responses", "chat_completions"])
async def provider(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAIServer
) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(base_url=fake_openai.base_url, api=request.param, max_retries=0)
    yield provider
    await provider.aclose()


def scripted(first_text: str) -> Any:
    def handler(req: FakeRequest) -> FakeReply:
        outputs = req.tool_outputs()
        if not outputs:
            return FakeReply(text=first_text)
        return FakeReply(text="Weather: " + "; ".join(str(v) for v in outputs.values()))

    return handler


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("form", sorted(FORMS))
async def test_each_text_form_runs_the_offered_tool(
    form: str, streamed: bool, provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    text, cities = FORMS[form]
    fake_openai.handler = scripted(text)
    CALLS.clear()
    agent = Agent("w", tools=[get_weather])
    config = RunConfig(model="local", model_provider=provider)
    if streamed:
        run = Runner.run_streamed(agent, "weather?", run_config=config)
        async for _ in run.stream_events():
            pass
        final = run.final_output
    else:
        final = (await Runner.run(agent, "weather?", run_config=config)).final_output
    assert CALLS == cities
    assert final.startswith("Weather: ")
    # the second request carries real tool calls and their outputs, paired by id
    second = fake_openai.requests[-1]
    assert [name for name, _, _ in second.tool_calls()] == ["get_weather"] * len(cities)
    assert set(second.tool_outputs()) == {cid for _, _, cid in second.tool_calls()}


async def test_a_tool_not_offered_is_not_run(
    provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    text = json.dumps({"name": "delete_everything", "arguments": {}})
    fake_openai.handler = scripted(text)
    result = await Runner.run(
        Agent("w", tools=[get_weather]),
        "go",
        run_config=RunConfig(model="local", model_provider=provider),
    )
    assert result.final_output == text  # stays the answer: nothing ran
    assert len(fake_openai.requests) == 1


async def test_no_tools_offered_means_text_stays_text(
    provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    text = json.dumps(OSLO)
    fake_openai.handler = scripted(text)
    result = await Runner.run(
        Agent("w"), "go", run_config=RunConfig(model="local", model_provider=provider)
    )
    assert result.final_output == text


@pytest.mark.parametrize("how", ["settings", "env"])
async def test_the_switch_turns_recovery_off(
    how: str,
    provider: OpenAIProvider,
    fake_openai: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = f"```json\n{json.dumps(OSLO)}\n```"
    fake_openai.handler = scripted(text)
    CALLS.clear()
    settings = None
    if how == "settings":
        settings = ModelSettings(text_tool_calls=False)
    else:
        monkeypatch.setenv("SANDMEM_TEXT_TOOL_CALLS", "0")
    agent = Agent("w", tools=[get_weather], model_settings=settings)
    result = await Runner.run(
        agent, "go", run_config=RunConfig(model="local", model_provider=provider)
    )
    assert CALLS == [] and result.final_output == text
    assert "text_tool_calls" not in json.dumps(fake_openai.requests[0].body)  # never sent


def test_on_by_default_except_on_openais_server(monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_openai_server(None) and is_openai_server("https://api.openai.com/v1/")
    assert not is_openai_server("http://127.0.0.1:8080/v1")
    assert not enabled(None, "https://api.openai.com/v1/")
    assert enabled(None, "http://localhost:11434/v1")
    assert enabled(True, "https://api.openai.com/v1/")
    assert not enabled(False, "http://localhost:11434/v1")
    monkeypatch.setenv("SANDMEM_TEXT_TOOL_CALLS", "1")
    assert enabled(None, "https://api.openai.com/v1/")
    monkeypatch.setenv("SANDMEM_TEXT_TOOL_CALLS", "maybe")
    with pytest.raises(UserError, match="SANDMEM_TEXT_TOOL_CALLS must be 1 or 0"):
        enabled(None, None)


def message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": text}


def test_recover_keeps_the_prose_and_leaves_examples_of_other_tools() -> None:
    text = f"Checking.\n```json\n{json.dumps(OSLO)}\n```\nThen done."
    out = recover([message(text)], ["get_weather"])
    assert out[0] == message("Checking.\n\nThen done.")
    assert out[1]["type"] == "function_call" and out[1]["name"] == "get_weather"
    assert json.loads(out[1]["arguments"]) == {"city": "Oslo"}
    # a list naming one unknown tool is not a call list: nothing is run
    mixed = json.dumps([OSLO, {"name": "rm", "arguments": {}}])
    assert recover([message(mixed)], ["get_weather"]) == [message(mixed)]
    # JSON that is not a call, and a real tool call already present, are left alone
    data = '```json\n{"city": "Oslo"}\n```'
    assert recover([message(data)], ["get_weather"]) == [message(data)]
    real = {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": "{}"}
    assert recover([message(json.dumps(OSLO)), real], ["get_weather"])[1] is real
    assert recover([message("{not json")], ["get_weather"]) == [message("{not json")]


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_the_observed_case_a_fenced_apply_patch_with_a_unified_diff(
    fake_openai: FakeOpenAIServer, api: str
) -> None:
    """What Qwen2.5-Coder-1.5B wrote with llama-server's stock template: the call as a fenced
    JSON block in its answer, here with the unified diff it knows; the file is changed."""
    from sandmem import File, Manifest, SandboxAgent, SandboxRunConfig, UnixLocalSandboxClient

    diff = "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-DEBUG = True\n+DEBUG = False\n"
    call = {"name": "apply_patch", "arguments": {"patch": diff}}

    def handler(req: FakeRequest) -> FakeReply:
        if not req.tool_outputs():
            return FakeReply(text=f"I will edit the file.\n```json\n{json.dumps(call)}\n```")
        return FakeReply(text="Turned DEBUG off.")

    fake_openai.handler = handler
    provider = OpenAIProvider(base_url=fake_openai.base_url, api=api, max_retries=0)  # type: ignore[arg-type]
    manifest = Manifest(entries={"app.py": File(content=b"DEBUG = True\n")})
    sandbox = await UnixLocalSandboxClient().create(manifest=manifest)
    async with sandbox:
        config = RunConfig(sandbox=SandboxRunConfig(session=sandbox), model_provider=provider)
        agent = SandboxAgent(name="fixer", model="qwen2.5-coder-1.5b")
        result = await Runner.run(agent, "Turn debug off in app.py", run_config=config)
        assert (sandbox.root / "app.py").read_text() == "DEBUG = False\n"
    await provider.aclose()
    assert result.final_output == "Turned DEBUG off."
    (output,) = fake_openai.requests[-1].tool_outputs().values()
    assert "app.py" in str(output) and not str(output).startswith("Error")
