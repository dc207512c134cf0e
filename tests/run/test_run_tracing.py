"""Spans of a run (``_run_tracing``): the tree, the GenAI attributes, token counts equal to
the run's usage, contents only when asked and then redacted, nothing when disabled."""

from __future__ import annotations

from typing import Any

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem import Agent, RunConfig, Runner, function_tool, tracing
from sandmem.models import OpenAIProvider
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel, tool_call

SECRET = "sk-proj-" + "Hv4" * 16


@function_tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}: token={SECRET}"


@function_tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"exploded: {reason}")


def script(request: ModelRequest) -> Any:
    if any(i.get("type") == "function_call_output" for i in request.input):
        return "done"
    return [tool_call("lookup", {"key": "alpha"}), tool_call("explode", {"reason": "test"})]


def agent() -> Agent:
    return Agent(
        name="helper",
        instructions=f"use the key {SECRET}",
        model=FunctionModel(script, name="scripted"),
        tools=[lookup, explode],
    )


def by_name(spans: Any) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


async def test_run_span_tree_and_genai_attributes(otel_spans: Any) -> None:
    config = RunConfig(
        workflow_name="lookups",
        trace_id="trace_0123456789abcdef0123456789abcdef",
        group_id="thread-7",
        trace_metadata={"team": "infra"},
    )
    with tracing.span("caller"):
        result = await Runner.run(agent(), f"look up alpha; my key is {SECRET}", run_config=config)
    spans = by_name(otel_spans.get_finished_spans())
    [caller], [run] = spans["caller"], spans["invoke_agent helper"]
    assert run.parent.span_id == caller.context.span_id
    attrs = dict(run.attributes)
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.agent.name"] == "helper"
    assert attrs["sandmem.workflow_name"] == "lookups"
    assert attrs["sandmem.trace_id"] == config.trace_id
    assert attrs["sandmem.group_id"] == "thread-7"
    assert attrs["sandmem.trace_metadata.team"] == "infra"
    assert attrs["sandmem.run.terminal_state"] == "completed"
    chats = spans["chat scripted"]
    assert len(chats) == result.usage.requests == 2
    for chat in chats:
        assert chat.parent.span_id == run.context.span_id
        assert chat.kind.name == "CLIENT"
        chat_attrs = dict(chat.attributes)
        assert chat_attrs["gen_ai.operation.name"] == "chat"
        assert chat_attrs["gen_ai.request.model"] == chat_attrs["gen_ai.response.model"]
        assert chat_attrs["gen_ai.system"] == "sandmem"
    assert sorted(c.attributes["gen_ai.response.finish_reasons"][0] for c in chats) == [
        "stop",
        "tool_calls",
    ]
    inputs = sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats)
    outputs = sum(c.attributes["gen_ai.usage.output_tokens"] for c in chats)
    assert (inputs, outputs) == (result.usage.input_tokens, result.usage.output_tokens)
    assert attrs["gen_ai.usage.input_tokens"] == result.usage.input_tokens > 0
    assert attrs["gen_ai.usage.output_tokens"] == result.usage.output_tokens > 0
    [ok], [bad] = spans["execute_tool lookup"], spans["execute_tool explode"]
    for tool in (ok, bad):
        assert tool.parent.span_id == run.context.span_id
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["gen_ai.tool.call.id"]
        assert tool.end_time > tool.start_time
    assert ok.status.status_code.name == "UNSET"
    assert bad.status.status_code.name == "ERROR"
    assert bad.attributes["error.type"] == "RuntimeError"
    # no message content unless asked
    everything = repr([dict(s.attributes) for s in otel_spans.get_finished_spans()])
    assert SECRET not in everything and "look up alpha" not in everything
    assert "gen_ai.input.messages" not in everything and "gen_ai.tool.call.result" not in everything


async def test_sensitive_data_is_recorded_redacted_when_asked(otel_spans: Any) -> None:
    config = RunConfig(trace_include_sensitive_data=True)
    await Runner.run(agent(), f"look up alpha; my key is {SECRET}", run_config=config)
    spans = by_name(otel_spans.get_finished_spans())
    first = min(spans["chat scripted"], key=lambda s: s.start_time)
    assert "look up alpha" in first.attributes["gen_ai.input.messages"]
    assert "use the key" in first.attributes["gen_ai.system_instructions"]
    assert "lookup" in first.attributes["gen_ai.output.messages"]
    [tool] = spans["execute_tool lookup"]
    assert "alpha" in tool.attributes["gen_ai.tool.call.arguments"]
    assert "value of alpha" in tool.attributes["gen_ai.tool.call.result"]
    everything = repr([dict(s.attributes) for s in otel_spans.get_finished_spans()])
    assert SECRET not in everything
    assert everything.count("[REDACTED:") >= 4


async def test_tracing_disabled_makes_no_run_spans(otel_spans: Any) -> None:
    result = await Runner.run(agent(), "look up", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "done"
    assert otel_spans.get_finished_spans() == ()


async def test_a_failed_run_ends_its_spans_with_an_error(otel_spans: Any) -> None:
    def broken(request: ModelRequest) -> Any:
        raise ValueError("model down")

    failing = Agent(name="helper", model=FunctionModel(broken, name="scripted"))
    with pytest.raises(ValueError):
        await Runner.run(failing, "hi")
    spans = by_name(otel_spans.get_finished_spans())
    [run], [chat] = spans["invoke_agent helper"], spans["chat scripted"]
    assert chat.parent.span_id == run.context.span_id
    for span in (run, chat):
        assert span.status.status_code.name == "ERROR"
    assert run.attributes["error.type"] == "ValueError"
    assert run.attributes["sandmem.run.terminal_state"] == "failed"


async def test_streamed_run_is_traced_too(otel_spans: Any) -> None:
    streamed = Runner.run_streamed(agent(), "look up")
    async for _ in streamed.stream_events():
        pass
    spans = by_name(otel_spans.get_finished_spans())
    [run] = spans["invoke_agent helper"]
    assert len(spans["chat scripted"]) == 2
    assert run.attributes["gen_ai.usage.input_tokens"] == streamed.usage.input_tokens


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_openai_model_spans_through_the_real_client(
    api: str, fake_openai: FakeOpenAIServer, otel_spans: Any
) -> None:
    def handler(req: FakeRequest) -> FakeReply:
        if not req.tool_outputs():
            return FakeReply(
                tool_calls=[("lookup", {"key": "k"}, "c1")], input_tokens=70, output_tokens=7
            )
        return FakeReply(text="found", input_tokens=90, output_tokens=9)

    fake_openai.handler = handler
    provider = OpenAIProvider(base_url=fake_openai.base_url, api=api)
    try:
        result = await Runner.run(
            Agent("helper", tools=[lookup]),
            "find k",
            run_config=RunConfig(model="fake-model", model_provider=provider),
        )
    finally:
        await provider.aclose()
    chats = by_name(otel_spans.get_finished_spans())["chat fake-model"]
    assert len(chats) == 2
    for chat in chats:
        attrs = dict(chat.attributes)
        assert attrs["gen_ai.system"] == "openai"
        assert attrs["gen_ai.request.model"] == attrs["gen_ai.response.model"] == "fake-model"
        assert attrs["gen_ai.response.id"]
    first, second = sorted(chats, key=lambda s: s.start_time)
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert second.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in (first, second)] == [70, 90]
    assert result.usage.input_tokens == 160 and result.usage.output_tokens == 16


async def test_a_run_inside_a_tool_nests_under_the_tool_span(otel_spans: Any) -> None:
    inner = Agent(name="inner", model=FunctionModel(lambda r: "inner answer", name="small"))

    @function_tool
    async def ask_inner(question: str) -> str:
        """Ask the inner agent."""
        return str((await Runner.run(inner, question)).final_output)

    def outer_script(request: ModelRequest) -> Any:
        if any(i.get("type") == "function_call_output" for i in request.input):
            return "outer answer"
        return [tool_call("ask_inner", {"question": "?"})]

    outer = Agent(name="outer", model=FunctionModel(outer_script, name="big"), tools=[ask_inner])
    await Runner.run(outer, "go")
    spans = by_name(otel_spans.get_finished_spans())
    [outer_run], [tool], [inner_run] = (
        spans["invoke_agent outer"],
        spans["execute_tool ask_inner"],
        spans["invoke_agent inner"],
    )
    assert tool.parent.span_id == outer_run.context.span_id
    assert inner_run.parent.span_id == tool.context.span_id
    [small] = spans["chat small"]
    assert small.parent.span_id == inner_run.context.span_id


def test_only_tracing_py_imports_opentelemetry() -> None:
    import pathlib

    import sandmem

    root = pathlib.Path(sandmem.__file__).parent
    importing = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "import opentelemetry" in path.read_text() or "from opentelemetry" in path.read_text()
    )
    assert importing == ["tracing.py"]
