"""run, run_sync and run_streamed as views of one loop: events, hooks, context, signatures."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sandmem import (
    Agent,
    AgentHooks,
    MaxTurnsExceeded,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    Runner,
    RunResultStreaming,
    SQLiteSession,
    ToolContext,
    UserError,
    function_tool,
)
from sandmem.agent._stream_events import RunEndEvent
from sandmem.models._base import ModelRequest, ModelResponse
from sandmem.testing import FunctionModel, text, tool_call


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _script(*turns: list[dict[str, object]] | str) -> FunctionModel:
    def fn(request: ModelRequest) -> list[dict[str, object]] | str:
        return turns[len(model.requests) - 1]

    model = FunctionModel(fn)
    return model


def _calc(model: FunctionModel, **kwargs: Any) -> Agent:
    return Agent(name="calc", instructions="Add.", model=model, tools=[add], **kwargs)


def _tool_then_answer() -> FunctionModel:
    return _script([text("let me add"), tool_call("add", {"a": 2, "b": 3}, "c1")], "five")


def _describe(event: Any) -> str:
    if event.type == "raw_response_event":
        return f"raw:{event.data.type}:{getattr(event.data, 'delta', '')}"
    if event.type == "run_item_stream_event":
        return f"item:{event.name}:{event.item.type}"
    return f"agent:{event.new_agent.name}"


async def test_streamed_events_in_order() -> None:
    agent = _calc(_tool_then_answer())
    result = Runner.run_streamed(agent, "add 2 and 3")
    assert isinstance(result, RunResultStreaming)
    assert not result.is_complete
    seen = [_describe(event) async for event in result.stream_events()]
    assert seen == [
        "agent:calc",
        "raw:response.output_text.delta:let me add",
        "item:message_output_created:message_output_item",
        "item:tool_called:tool_call_item",
        "item:tool_output:tool_call_output_item",
        "raw:response.output_text.delta:five",
        "item:message_output_created:message_output_item",
    ]
    assert result.is_complete
    assert result.final_output == "five"
    assert [i.get("type") for i in result.new_items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert result.usage.requests == 2
    assert result.current_turn == 2
    assert result.to_input_list()[0]["content"] == "add 2 and 3"


async def test_streamed_tool_output_event_carries_output() -> None:
    result = Runner.run_streamed(_calc(_tool_then_answer()), "go")
    outputs = [
        e.item.output
        async for e in result.stream_events()
        if e.type == "run_item_stream_event" and e.name == "tool_output"
    ]
    assert outputs == ["5"]


async def test_run_and_streamed_produce_the_same_items() -> None:
    plain = await Runner.run(_calc(_tool_then_answer()), "go")
    streamed = Runner.run_streamed(_calc(_tool_then_answer()), "go")
    async for _ in streamed.stream_events():
        pass
    assert streamed.new_items == plain.new_items
    assert streamed.final_output == plain.final_output
    assert streamed.usage == plain.usage


async def test_streamed_error_raised_from_stream_events() -> None:
    agent = _calc(_script(*[[tool_call("add", {"a": 1, "b": 1})]] * 3))
    result = Runner.run_streamed(agent, "loop", max_turns=2)
    events = []
    with pytest.raises(MaxTurnsExceeded):
        async for event in result.stream_events():
            events.append(event)
    assert result.is_complete
    assert events[0].type == "agent_updated_stream_event"


async def test_streamed_misuse_refused_before_first_model_call() -> None:
    model = _script("never")
    agent = Agent(name="dup", model=model, tools=[add, add])
    result = Runner.run_streamed(agent, "x")
    with pytest.raises(UserError, match="two tools are named 'add'"):
        async for _ in result.stream_events():
            pass
    assert model.requests == []


async def test_cancel_immediately_ends_the_stream() -> None:
    started = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        started.set()
        await asyncio.sleep(30)
        return "late"

    result = Runner.run_streamed(Agent(name="slow", model=FunctionModel(slow)), "x")
    events = []

    async def consume() -> None:
        async for event in result.stream_events():
            events.append(event)

    consumer = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 5)
    result.cancel()
    await asyncio.wait_for(consumer, 5)
    assert result.is_complete
    assert result.final_output is None
    assert [e.type for e in events] == ["agent_updated_stream_event"]


async def test_cancel_after_turn_stops_after_tools() -> None:
    model = _script(*[[tool_call("add", {"a": 1, "b": 1})]] * 5)
    result = Runner.run_streamed(_calc(model), "x")
    async for event in result.stream_events():
        if event.type == "run_item_stream_event" and event.name == "tool_called":
            result.cancel(mode="after_turn")
    assert len(model.requests) == 1
    assert result.new_items[-1]["type"] == "function_call_output"


def test_run_streamed_needs_a_running_loop() -> None:
    with pytest.raises(UserError, match="running event loop"):
        Runner.run_streamed(_calc(_script("x")), "x")


# --- hooks -------------------------------------------------------------------------------


class _Recorder(RunHooks[Any]):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def on_agent_start(self, context: RunContextWrapper[Any], agent: Agent) -> None:
        self.log.append(f"run.agent_start:{agent.name}")

    async def on_agent_end(
        self, context: RunContextWrapper[Any], agent: Agent, output: Any
    ) -> None:
        self.log.append(f"run.agent_end:{output}")

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent,
        system_prompt: str | None,
        input_items: list[dict[str, Any]],
    ) -> None:
        self.log.append(f"run.llm_start:{system_prompt}:{len(input_items)}")

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent, response: ModelResponse
    ) -> None:
        self.log.append(f"run.llm_end:{len(response.output)}")

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent, tool: Any) -> None:
        assert isinstance(context, ToolContext)
        self.log.append(f"run.tool_start:{tool.name}:{context.tool_call_id}")

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent, tool: Any, result: Any
    ) -> None:
        self.log.append(f"run.tool_end:{tool.name}:{result}")


class _AgentRecorder(AgentHooks[Any]):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def on_start(self, context: RunContextWrapper[Any], agent: Agent) -> None:
        self.log.append("agent.start")

    async def on_end(self, context: RunContextWrapper[Any], agent: Agent, output: Any) -> None:
        self.log.append("agent.end")

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent, tool: Any) -> None:
        self.log.append("agent.tool_start")

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent, tool: Any, result: Any
    ) -> None:
        self.log.append("agent.tool_end")


EXPECTED_HOOKS = [
    "run.agent_start:calc",
    "agent.start",
    "run.llm_start:Add.:1",
    "run.llm_end:1",
    "run.tool_start:add:c1",
    "agent.tool_start",
    "run.tool_end:add:5",
    "agent.tool_end",
    "run.llm_start:Add.:3",
    "run.llm_end:1",
    "run.agent_end:five",
    "agent.end",
]


@pytest.mark.parametrize("view", ["run", "streamed"])
async def test_hooks_called_in_order(view: str) -> None:
    log: list[str] = []
    model = _script([tool_call("add", {"a": 2, "b": 3}, "c1")], "five")
    agent = _calc(model, hooks=_AgentRecorder(log))
    if view == "run":
        await Runner.run(agent, "go", hooks=_Recorder(log))
    else:
        streamed = Runner.run_streamed(agent, "go", hooks=_Recorder(log))
        async for _ in streamed.stream_events():
            pass
    assert log == EXPECTED_HOOKS


def test_hooks_with_run_sync() -> None:
    log: list[str] = []
    model = _script([tool_call("add", {"a": 2, "b": 3}, "c1")], "five")
    Runner.run_sync(_calc(model, hooks=_AgentRecorder(log)), "go", hooks=_Recorder(log))
    assert log == EXPECTED_HOOKS


async def test_a_failing_hook_fails_the_run() -> None:
    class Broken(RunHooks[Any]):
        async def on_llm_start(self, *args: Any) -> None:
            raise RuntimeError("hook broke")

    model = _script("never")
    with pytest.raises(RuntimeError, match="hook broke"):
        await Runner.run(_calc(model), "x", hooks=Broken())
    assert model.requests == []


# --- context -------------------------------------------------------------------------------


class _User:
    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0


@function_tool
def whoami(ctx: RunContextWrapper[_User], greeting: str) -> str:
    """Greet the current user.

    Args:
        greeting: The word to greet with.
    """
    ctx.context.calls += 1
    return f"{greeting}, {ctx.context.name} (requests so far: {ctx.usage.requests})"


@function_tool
async def call_info(ctx: ToolContext[_User]) -> str:
    """Report the tool call."""
    return f"{ctx.tool_name}/{ctx.tool_call_id}/{ctx.tool_arguments}"


def test_context_parameter_is_not_in_the_schema() -> None:
    assert list(whoami.params_json_schema["properties"]) == ["greeting"]
    assert whoami.params_json_schema["properties"]["greeting"]["description"] == (
        "The word to greet with."
    )
    assert call_info.params_json_schema["properties"] == {}


async def test_context_reaches_tools_and_dynamic_instructions() -> None:
    user = _User("ada")
    seen: list[Any] = []

    def instructions(ctx: RunContextWrapper[_User], agent: Agent) -> str:
        seen.append(ctx.context)
        return f"You help {ctx.context.name}; you are {agent.name}."

    model = _script(
        [tool_call("whoami", {"greeting": "hi"}, "w1"), tool_call("call_info", {}, "i1")],
        "ok",
    )
    agent = Agent(name="helper", instructions=instructions, model=model, tools=[whoami, call_info])
    result = await Runner.run(agent, "who am I?", context=user)
    assert result.final_output == "ok"
    assert model.requests[0].instructions == "You help ada; you are helper."
    assert seen == [user, user]  # called before each model call
    outputs = {o["call_id"]: o["output"] for o in result.new_items if "output" in o}
    assert outputs == {"w1": "hi, ada (requests so far: 1)", "i1": "call_info/i1/{}"}
    assert user.calls == 1
    assert result.context_wrapper.context is user
    assert result.context_wrapper.usage is result.usage


async def test_async_dynamic_instructions() -> None:
    async def instructions(ctx: RunContextWrapper[dict[str, str]], agent: Agent) -> str:
        await asyncio.sleep(0)
        return f"Speak {ctx.context['lang']}."

    model = _script("bonjour")
    agent = Agent(name="a", instructions=instructions, model=model)
    await Runner.run(agent, "hi", context={"lang": "French"})
    assert model.requests[0].instructions == "Speak French."


# --- signatures ----------------------------------------------------------------------------


async def test_reference_signature_keywords() -> None:
    model = _script("ok")
    agent = Agent(name="a", model=model)
    session = SQLiteSession("sig")
    result = await Runner.run(
        starting_agent=agent,
        input="hi",
        context={"k": 1},
        max_turns=3,
        hooks=RunHooks(),
        run_config={"workflow_name": "sig test", "tracing_disabled": True},
        previous_response_id=None,
        conversation_id=None,
        session=session,
    )
    assert result.final_output == "ok"
    assert result.last_agent is agent
    assert len(await session.get_items()) == 2


async def test_agent_alias_and_conflicts() -> None:
    agent = Agent(name="a", model=_script("ok", "ok"))
    assert (await Runner.run(agent=agent, input="hi")).final_output == "ok"
    with pytest.raises(UserError, match="pass the agent once"):
        await Runner.run(agent, "hi", agent=Agent(name="b"))
    with pytest.raises(UserError, match="needs an Agent"):
        await Runner.run(input="hi")
    with pytest.raises(UserError, match="needs an input"):
        await Runner.run(agent)


async def test_run_streamed_takes_reference_positionals() -> None:
    agent = Agent(name="a", model=_script("ok"))
    result = Runner.run_streamed(agent, "hi", {"ctx": True}, 4, None, RunConfig())
    async for _ in result.stream_events():
        pass
    assert result.context_wrapper.context == {"ctx": True}
    assert result.max_turns == 4


async def test_previous_response_id_sends_only_new_items() -> None:
    def fn(request: ModelRequest) -> ModelResponse:
        n = len(model.requests)
        items = [tool_call("add", {"a": 1, "b": 2}, "p1")] if n == 1 else [text("three")]
        return ModelResponse(output=items, response_id=f"resp_{n}")

    model = FunctionModel(fn)
    session = SQLiteSession("prev")
    await session.add_items([{"role": "user", "content": "old turn"}])
    result = await Runner.run(_calc(model), "add", previous_response_id="resp_0", session=session)
    assert result.final_output == "three"
    first, second = model.requests
    assert first.previous_response_id == "resp_0"
    assert [(i["role"], i["content"]) for i in first.input] == [("user", "add")]
    assert second.previous_response_id == "resp_1"
    assert [i["type"] for i in second.input] == ["function_call_output"]
    assert result.last_response_id == "resp_2"


async def test_run_config_model_settings_override_the_agents() -> None:
    model = _script("ok")
    agent = Agent(name="a", model=model, model_settings={"temperature": 0.1, "max_tokens": 50})
    await Runner.run(agent, "x", run_config=RunConfig(model_settings={"temperature": 0.9}))
    settings = model.requests[0].settings
    assert (settings.temperature, settings.max_tokens) == (0.9, 50)


async def test_listener_seam_sees_every_event_and_run_end_last() -> None:
    from sandmem.run._loop import RunProgress, RunSpec, execute

    seen: list[str] = []

    async def listener(event: Any) -> None:
        seen.append(event.type)

    model = _script([tool_call("add", {"a": 1, "b": 1}, "x1")], "2")
    spec = RunSpec(agent=_calc(model), input="x", listeners=[listener])
    progress = RunProgress(RunContextWrapper(None), spec.agent)
    assert await execute(spec, progress) == "2"
    assert seen[0] == "agent_updated_stream_event"
    assert seen[-1] == "run_end"
    assert seen.count("llm_start") == seen.count("llm_end") == 2
    assert ["tool_start", "tool_end"] == [t for t in seen if t.startswith("tool_")]
    assert RunEndEvent.__dataclass_fields__["outcome"]


# --- memory for streamed runs ---------------------------------------------------------------


async def test_streamed_run_records_memory_like_run(tmp_path: Path) -> None:
    from sandmem import Filesystem, Memory, SandboxAgent, SandboxRunConfig, Shell
    from sandmem.memory import MemoryGenerateConfig
    from sandmem.sandboxes import File, Manifest, UnixLocalSandboxClient

    def model_fn(request: ModelRequest) -> list[dict[str, object]] | str:
        if not any(i.get("type") == "function_call_output" for i in request.input):
            return [tool_call("exec_command", {"cmd": "cat app.py"}, "e1")]
        return "Read app.py."

    memory = Memory(
        generate=MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")
    )
    agent = SandboxAgent(
        name="dev", model=FunctionModel(model_fn), capabilities=[memory, Filesystem(), Shell()]
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest(entries={"app.py": File(content=b"x = 1\n")}))
    async with sandbox:
        config = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        result = Runner.run_streamed(agent, "look", run_config=config, conversation_id="s1")
        names = [e.name async for e in result.stream_events() if e.type == "run_item_stream_event"]
        assert names == ["tool_called", "tool_output", "message_output_created"]
        segment = json.loads((sandbox.root / "sessions/s1.jsonl").read_text())
    assert segment["terminal_metadata"]["terminal_state"] == "completed"
    assert segment["final_output"] == "Read app.py."
    assert [i.get("type", "message") for i in segment["generated_items"]] == [
        "function_call",
        "function_call_output",
        "message",
    ]
    assert (sandbox.root / "memories/MEMORY.md").exists()


def test_run_config_takes_the_reference_fields() -> None:
    config = RunConfig(
        model="m",
        model_settings={"temperature": 0.3},
        workflow_name="wf",
        trace_id="trace_123",
        group_id="g1",
        trace_metadata={"k": "v"},
        tracing_disabled=True,
        trace_include_sensitive_data=False,
    )
    assert config.model_settings is not None and config.model_settings.temperature == 0.3
    assert (config.workflow_name, config.trace_id, config.group_id) == ("wf", "trace_123", "g1")


@pytest.mark.parametrize("mode", ["immediate", "after_turn"])
async def test_cancelled_streamed_run_is_recorded_as_cancelled(mode: str) -> None:
    from sandmem import Filesystem, Memory, SandboxAgent, SandboxRunConfig, Shell
    from sandmem.memory import MemoryGenerateConfig
    from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

    release = asyncio.Event()
    if mode == "after_turn":
        release.set()  # the turn in progress finishes; the run stops at its end

    async def model_fn(request: ModelRequest) -> list[dict[str, object]]:
        if any(i.get("type") == "function_call_output" for i in request.input):
            await release.wait()  # the second turn never finishes on its own
        return [tool_call("exec_command", {"cmd": "true"})]

    memory = Memory(
        generate=MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")
    )
    agent = SandboxAgent(
        name="dev", model=FunctionModel(model_fn), capabilities=[memory, Filesystem(), Shell()]
    )
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest())
    async with sandbox:
        config = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        result = Runner.run_streamed(agent, "go", run_config=config, conversation_id="cx")

        async def consume() -> None:
            async for event in result.stream_events():
                if event.type == "run_item_stream_event" and event.name == "tool_output":
                    result.cancel(mode=mode)  # type: ignore[arg-type]

        await asyncio.wait_for(consume(), 10)
        assert result.is_complete
        segment = json.loads((sandbox.root / "sessions/cx.jsonl").read_text())
    assert segment["terminal_metadata"]["terminal_state"] == "cancelled"
    assert segment["terminal_metadata"]["has_final_output"] is False
    assert [i["type"] for i in segment["generated_items"]][:2] == [
        "function_call",
        "function_call_output",
    ]


async def test_max_turns_none_means_no_limit() -> None:
    model = _script(*[[tool_call("add", {"a": 1, "b": 1})]] * 12, "done")
    result = await Runner.run(_calc(model), "x", max_turns=None)
    assert result.final_output == "done"
    assert len(model.requests) == 13
    with pytest.raises(UserError, match="max_turns"):
        await Runner.run(_calc(_script("x")), "x", max_turns=0)


async def test_agent_clone_and_instructions_helpers() -> None:
    base = Agent(name="a", instructions="Be brief.", model=_script("ok"))
    other = base.clone(name="b", instructions=lambda ctx, agent: f"I am {agent.name}.")
    assert (other.name, base.name) == ("b", "a")
    assert other.model is base.model
    ctx = RunContextWrapper(None)
    assert await other.get_instructions(ctx) == "I am b."
    assert await base.get_system_prompt(ctx) == "Be brief."
    with pytest.raises(TypeError, match="instructions"):
        Agent(name="x", instructions=3)  # type: ignore[arg-type]
