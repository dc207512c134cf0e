"""Typed item views and ItemHelpers: the reference's way of reading a run's items, over the
plain dicts that memory records."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

from sandmem import (
    Agent,
    ItemHelpers,
    MessageOutputItem,
    Runner,
    ToolCallItem,
    ToolCallOutputItem,
    function_tool,
)
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel, text, tool_call, tool_outputs


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny"


def _model() -> FunctionModel:
    def fn(request: ModelRequest) -> Any:
        if not tool_outputs(request):
            return [text("checking"), tool_call("weather", {"city": "Oslo"}, "c1")]
        return [text("It is "), text("sunny.")]

    return FunctionModel(fn)


def _agent() -> Agent:
    return Agent(name="w", model=_model(), tools=[weather])


async def test_new_items_are_typed_views_and_still_plain_items() -> None:
    agent = _agent()
    result = await Runner.run(agent, "weather?")
    kinds = [type(item).__name__ for item in result.new_items]
    assert kinds == [
        "MessageOutputItem",
        "ToolCallItem",
        "ToolCallOutputItem",
        "MessageOutputItem",
        "MessageOutputItem",
    ]
    call = result.new_items[1]
    assert isinstance(call, ToolCallItem)
    assert call["type"] == "function_call" and call.type == "tool_call_item"
    assert call.raw_item.name == "weather" and call.raw_item["call_id"] == "c1"
    assert call.agent is agent
    output = result.new_items[2]
    assert isinstance(output, ToolCallOutputItem) and output.output == "Oslo: sunny"
    # what memory and sessions store stays the plain dict
    plain = json.loads(json.dumps(result.new_items))
    assert plain[1] == {
        "type": "function_call",
        "call_id": "c1",
        "name": "weather",
        "arguments": '{"city": "Oslo"}',
    }
    assert type(copy.deepcopy(call)) is dict
    assert type(pickle.loads(pickle.dumps(call))) is dict
    assert result.to_input_list()[2] == dict(call)


async def test_item_helpers_on_a_run_result() -> None:
    result = await Runner.run(_agent(), "weather?")
    assert ItemHelpers.text_message_outputs(result.new_items) == "checkingIt is sunny."
    last = [i for i in result.new_items if isinstance(i, MessageOutputItem)][-1]
    assert ItemHelpers.text_message_output(last) == "sunny."
    assert ItemHelpers.extract_last_text(last) == "sunny."
    assert ItemHelpers.extract_last_text(result.new_items[1]) is None
    assert ItemHelpers.extract_last_content(result.new_items[1]) == ""


async def test_item_helpers_on_streamed_items() -> None:
    result = Runner.run_streamed(_agent(), "weather?")
    texts, names = [], []
    async for event in result.stream_events():
        if event.type != "run_item_stream_event":
            continue
        if event.item.type == "message_output_item":
            texts.append(ItemHelpers.text_message_output(event.item))
        elif event.item.type == "tool_call_item":
            names.append(event.item.raw_item.name)
    assert texts == ["checking", "It is ", "sunny."]
    assert names == ["weather"]
    assert ItemHelpers.text_message_outputs(result.new_items) == "checkingIt is sunny."


def test_item_helpers_build_items() -> None:
    assert ItemHelpers.input_to_new_input_list("hi") == [{"content": "hi", "role": "user"}]
    given = [{"role": "user", "content": [{"type": "input_text", "text": "x"}]}]
    copied = ItemHelpers.input_to_new_input_list(given)
    assert copied == given and copied[0]["content"] is not given[0]["content"]
    call = {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"}
    assert ItemHelpers.tool_call_output_item(call, 42) == {
        "type": "function_call_output",
        "call_id": "c9",
        "output": "42",
    }
    nested = MessageOutputItem(
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]}
    )
    assert nested.raw_item.content[0].text == "a"
