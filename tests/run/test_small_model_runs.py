"""What a run does with a small model's habits: the same failing call again and again, JSON
wrapped in prose, answers without end (every request carries max_tokens), slow servers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest
from pydantic import BaseModel

from sandmem import (
    Agent,
    File,
    Manifest,
    ModelBehaviorError,
    ModelRequestError,
    ModelSettings,
    RepeatedToolCallError,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    UnixLocalSandboxClient,
    UserError,
    function_tool,
)
from sandmem.agent._schema import json_answer
from sandmem.models import OpenAIProvider
from sandmem.testing import FunctionModel, tool_call

#: what Qwen2.5-Coder-1.5B sent 40 times in a row
BAD_PATCH = "*** Begin Patch\nhello.py\n+print('hi')\n*** End Patch"


class Verdict(BaseModel):
    ok: bool
    reason: str


def provider_for(server: FakeOpenAIServer, api: str) -> OpenAIProvider:
    return OpenAIProvider(base_url=server.base_url, api=api, max_retries=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_the_same_failing_apply_patch_ends_the_run_after_three(
    fake_openai: FakeOpenAIServer, api: str
) -> None:
    count = 0

    def handler(req: FakeRequest) -> FakeReply:
        nonlocal count
        count += 1
        return FakeReply(tool_calls=[("apply_patch", {"patch": BAD_PATCH}, f"c{count}")])

    fake_openai.handler = handler
    provider = provider_for(fake_openai, api)
    sandbox = await UnixLocalSandboxClient().create(
        manifest=Manifest(entries={"a": File(content=b"")})
    )
    async with sandbox:
        config = RunConfig(sandbox=SandboxRunConfig(session=sandbox), model_provider=provider)
        with pytest.raises(RepeatedToolCallError) as info:
            await Runner.run(SandboxAgent(name="a", model="m"), "fix", run_config=config)
    await provider.aclose()
    assert len(fake_openai.requests) == 3  # not max_turns (10)
    error = info.value
    assert (error.tool_name, error.times) == ("apply_patch", 3)
    assert "PatchError: line 2: expected '*** Add File: '" in error.last_error
    assert "3 times" in str(error) and "max_repeated_tool_failures" in str(error)
    assert isinstance(error, ModelBehaviorError)
    outputs = [i for i in error.items if i.get("type") == "function_call_output"]
    assert len(outputs) == 3 and "The expected form" in str(outputs[0]["output"])


@function_tool
def divide(a: int, b: int) -> float:
    """a / b."""
    return a / b


def looping(calls: list[dict[str, Any]]) -> FunctionModel:
    """A model sending ``calls`` in order (each a turn), then a final answer."""
    turns = iter(calls)

    def answer(request: Any) -> Any:
        args = next(turns, None)
        return "done" if args is None else [tool_call("divide", args)]

    return FunctionModel(answer)


async def test_varied_or_succeeding_calls_do_not_trip_the_guard() -> None:
    # a failing call retried with other arguments, and key order / spacing changes counted as
    # the same call only when the arguments are the same
    calls = [{"a": 1, "b": 0}, {"a": 1, "b": 0}, {"a": 2, "b": 0}, {"a": 1, "b": 1}]
    result = await Runner.run(Agent("d", model=looping(calls), tools=[divide]), "x")
    assert result.final_output == "done"
    same = [{"a": 1, "b": 0}, {"b": 0, "a": 1}, json.loads('{"a":1,"b":0}')]
    with pytest.raises(RepeatedToolCallError, match="'divide' 3 times"):
        await Runner.run(Agent("d", model=looping(same), tools=[divide]), "x")


async def test_the_limit_is_configurable_and_can_be_off() -> None:
    calls = [{"a": 1, "b": 0}] * 5
    agent = Agent("d", model=looping(calls), tools=[divide])
    with pytest.raises(RepeatedToolCallError) as info:
        await Runner.run(agent, "x", run_config=RunConfig(max_repeated_tool_failures=5))
    assert info.value.times == 5
    agent = Agent("d", model=looping(calls), tools=[divide])
    config = RunConfig(max_repeated_tool_failures=None)
    assert (await Runner.run(agent, "x", run_config=config)).final_output == "done"
    with pytest.raises(UserError, match="max_repeated_tool_failures"):
        RunConfig(max_repeated_tool_failures=0)


async def test_unknown_tools_repeated_end_the_run_too() -> None:
    model = FunctionModel(lambda request: [tool_call("nope", {})])
    with pytest.raises(RepeatedToolCallError, match="'nope'"):
        await Runner.run(Agent("d", model=model, tools=[divide]), "x")
    assert len(model.requests) == 3


# ----------------------------------------------------------------- JSON answers


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"ok": true, "reason": "fine"}\n```',
        '{"ok": true, "reason": "fine"}\nI hope this helps!',
        'Here is the verdict: {"ok": true, "reason": "fine"} -- done',
        'Sure.\n```\n{"ok": true, "reason": "fine"}\n```\nAnything else?',
    ],
)
@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_json_in_a_fence_or_with_prose_is_parsed(
    fake_openai: FakeOpenAIServer, api: str, text: str
) -> None:
    fake_openai.handler = lambda req: FakeReply(text=text)
    provider = provider_for(fake_openai, api)
    agent = Agent("j", output_type=Verdict)
    result = await Runner.run(
        agent, "judge", run_config=RunConfig(model="m", model_provider=provider)
    )
    await provider.aclose()
    assert result.final_output == Verdict(ok=True, reason="fine")
    assert len(fake_openai.requests) == 1  # no repair needed


def test_json_answer_takes_the_first_value_whichever_bracket() -> None:
    assert json_answer('list: [{"a": 1}] end') == [{"a": 1}]
    assert json_answer('x {"a": [1]} y') == {"a": [1]}
    with pytest.raises(json.JSONDecodeError):
        json_answer("no json at all")


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_a_malformed_answer_gets_one_repair_request(
    fake_openai: FakeOpenAIServer, api: str
) -> None:
    answers = iter(['{"ok": true, "reason": ', '{"ok": true, "reason": "fixed"}'])
    fake_openai.handler = lambda req: FakeReply(text=next(answers))
    provider = provider_for(fake_openai, api)
    result = await Runner.run(
        Agent("j", output_type=Verdict),
        "judge",
        run_config=RunConfig(model="m", model_provider=provider),
    )
    await provider.aclose()
    assert result.final_output == Verdict(ok=True, reason="fixed")
    assert len(fake_openai.requests) == 2
    repair = fake_openai.requests[1].last_user_text()
    assert "could not be used" in repair and "not valid JSON" in repair
    assert "no code fence" in repair


async def test_a_second_malformed_answer_is_the_error() -> None:
    model = FunctionModel(lambda request: "not json, sorry")
    with pytest.raises(ModelBehaviorError, match="not valid JSON"):
        await Runner.run(Agent("j", model=model, output_type=Verdict), "judge")
    assert len(model.requests) == 2  # the answer, one repair, then the error


# ----------------------------------------------------------------- max_tokens


def limit_of(req: FakeRequest) -> Any:
    key = "max_output_tokens" if req.api == "responses" else "max_completion_tokens"
    assert "max_tokens" not in req.body
    return req.body.get(key)


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_every_run_request_carries_max_tokens(
    fake_openai: FakeOpenAIServer, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.handler = lambda req: FakeReply(text="hi")
    provider = provider_for(fake_openai, api)
    config = RunConfig(model="m", model_provider=provider)
    await Runner.run(Agent("a"), "x", run_config=config)
    await Runner.run(
        Agent("a", model_settings=ModelSettings(max_tokens=77)), "x", run_config=config
    )
    monkeypatch.setenv("SANDMEM_MAX_TOKENS", "1234")
    await Runner.run(Agent("a"), "x", run_config=config)
    await provider.aclose()
    assert [limit_of(r) for r in fake_openai.requests] == [4096, 77, 1234]
    monkeypatch.setenv("SANDMEM_MAX_TOKENS", "lots")
    with pytest.raises(UserError, match="SANDMEM_MAX_TOKENS must be a positive integer"):
        await Runner.run(Agent("a", model=FunctionModel(lambda r: "x")), "x")


async def test_a_timeout_names_the_setting(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.inject(delay_s=1.0)
    provider = OpenAIProvider(base_url=fake_openai.base_url, timeout=0.2, max_retries=0)
    with pytest.raises(ModelRequestError) as info:
        await Runner.run(Agent("a"), "x", run_config=RunConfig(model="m", model_provider=provider))
    await provider.aclose()
    assert info.value.timeout
    message = str(info.value)
    assert "timed out" in message and "0.2 s" in message
    assert "--timeout / SANDMEM_TIMEOUT" in message and "a local server" in message


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_an_answer_cut_off_before_saying_anything_is_an_error(
    fake_openai: FakeOpenAIServer, api: str
) -> None:
    fake_openai.handler = lambda req: FakeReply(text="", cut_off=True)
    provider = provider_for(fake_openai, api)
    config = RunConfig(model="m", model_provider=provider)
    with pytest.raises(ModelBehaviorError, match="used up max_tokens=4096 before answering"):
        await Runner.run(Agent("a"), "x", run_config=config)
    # a partial answer cut off at the limit is still an answer
    fake_openai.handler = lambda req: FakeReply(text="The first half", cut_off=True)
    assert (await Runner.run(Agent("a"), "x", run_config=config)).final_output == "The first half"
    await provider.aclose()
