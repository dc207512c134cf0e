"""``sandmem.tracing``: spans through the OpenTelemetry API, GenAI attributes on model
requests, redaction of recorded contents, and a no-op without OpenTelemetry."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from sandmem import tracing
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel, tool_call

SECRET = "sk-proj-" + "Q7x" * 16


def request(text: str = "hello") -> ModelRequest:
    return ModelRequest(
        instructions=f"be brief; key {SECRET}",
        input=[{"role": "user", "content": f"{text} {SECRET}"}],
    )


async def test_model_span_has_genai_attributes_and_no_content(otel_spans: Any) -> None:
    model = tracing.instrument_model(FunctionModel(lambda r: "hi there", name="tiny"))
    assert isinstance(model, tracing.InstrumentedModel)
    response = await model.get_response(request())
    [span] = otel_spans.get_finished_spans()
    assert span.name == "chat tiny"
    assert span.kind.name == "CLIENT"
    attrs = dict(span.attributes)
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.system"] == "sandmem"
    assert attrs["gen_ai.request.model"] == attrs["gen_ai.response.model"] == "tiny"
    assert attrs["gen_ai.usage.input_tokens"] == response.usage.input_tokens > 0
    assert attrs["gen_ai.usage.output_tokens"] == response.usage.output_tokens > 0
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert not any("messages" in key or "instructions" in key for key in attrs)
    assert SECRET not in repr(attrs)


async def test_sensitive_contents_are_recorded_redacted(otel_spans: Any) -> None:
    fn = FunctionModel(lambda r: [tool_call("lookup", {"key": SECRET})], name="tiny")
    model = tracing.instrument_model(fn, include_sensitive_data=True)
    await model.get_response(request("look up"))
    [span] = otel_spans.get_finished_spans()
    attrs = dict(span.attributes)
    assert attrs["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert "look up" in attrs["gen_ai.input.messages"]
    assert "be brief" in attrs["gen_ai.system_instructions"]
    assert "lookup" in attrs["gen_ai.output.messages"]
    for key in ("gen_ai.input.messages", "gen_ai.system_instructions", "gen_ai.output.messages"):
        assert SECRET not in attrs[key] and "[REDACTED:" in attrs[key]


async def test_a_failed_request_is_an_error_span_with_redacted_message(otel_spans: Any) -> None:
    def boom(r: ModelRequest) -> str:
        raise RuntimeError(f"server echoed {SECRET}")

    model = tracing.instrument_model(FunctionModel(boom, name="tiny"))
    with pytest.raises(RuntimeError):
        await model.get_response(request())
    [span] = otel_spans.get_finished_spans()
    assert span.status.status_code.name == "ERROR"
    assert span.attributes["error.type"] == "RuntimeError"
    assert SECRET not in (span.status.description or "")
    assert [e.name for e in span.events] == ["exception"]
    assert SECRET not in repr(span.events[0].attributes)


async def test_spans_nest_through_concurrent_tasks(otel_spans: Any) -> None:
    async def child(n: int) -> None:
        with tracing.span("child", {"n": n}):
            await asyncio.sleep(0.01 * (3 - n))
            with tracing.span("grandchild", {"n": n}):
                await asyncio.sleep(0)

    with tracing.span("parent"):
        await asyncio.gather(*(child(n) for n in range(3)))
    spans = {(s.name, s.attributes.get("n")): s for s in otel_spans.get_finished_spans()}
    parent = spans[("parent", None)]
    for n in range(3):
        assert spans[("child", n)].parent.span_id == parent.context.span_id
        assert spans[("grandchild", n)].parent.span_id == spans[("child", n)].context.span_id


def test_span_handle_is_a_no_op_when_disabled(otel_spans: Any) -> None:
    with tracing.span("off", enabled=False) as current:
        current.set(anything=1)
        current.fail("X")
        assert not current.recording
    assert otel_spans.get_finished_spans() == ()


def test_without_opentelemetry_everything_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import now raises ImportError
    tracing._otel.cache_clear()
    try:
        assert not tracing.is_available()
        model = FunctionModel(lambda r: "x")
        assert tracing.instrument_model(model) is model
        with tracing.span("nothing", {"a": 1}) as current:
            current.set(b=2)
            assert not current.recording
    finally:
        monkeypatch.undo()
        tracing._otel.cache_clear()
    assert tracing.is_available()


def test_only_tracing_imports_opentelemetry() -> None:
    import subprocess

    code = (
        "import sys, sandmem, sandmem.cli, sandmem.memory.generation.manager;"
        "print(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
