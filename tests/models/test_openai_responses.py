"""Canonical items -> Responses API request (pure conversion)."""

from __future__ import annotations

from openai.types.responses import Response, ResponseOutputMessage

from sandmem.models import ModelRequest, OutputSchema
from sandmem.models.openai_responses import build_request, input_items, output_items


def test_input_drops_reasoning_and_extra_fields() -> None:
    items = input_items(
        [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "f",
                "arguments": "{}",
                "id": "fc_1",
                "status": "completed",
            },
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {"type": "message", "role": "assistant", "content": "done"},
        ]
    )
    assert items == [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "message", "role": "assistant", "content": "done"},
    ]


def test_request_without_optional_parts() -> None:
    kwargs = build_request("m", ModelRequest(None, [{"role": "user", "content": "x"}]))
    assert set(kwargs) == {"model", "input", "store"}


def test_request_with_schema() -> None:
    schema = OutputSchema("Answer", {"type": "object", "properties": {}})
    kwargs = build_request("m", ModelRequest("sys", [], output_schema=schema))
    assert kwargs["instructions"] == "sys"
    assert kwargs["text"] == {
        "format": {
            "type": "json_schema",
            "name": "Answer",
            "schema": schema.json_schema,
            "strict": True,
        }
    }


def test_refusal_becomes_the_message_text() -> None:
    message = ResponseOutputMessage.model_validate(
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "refusal", "refusal": "I can't help with that."}],
        }
    )
    response = Response.model_construct(id="resp_1", output=[message])
    assert output_items(response) == [
        {"type": "message", "role": "assistant", "content": "I can't help with that."}
    ]
