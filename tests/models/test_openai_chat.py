"""Canonical items <-> Chat Completions messages (pure conversion)."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from sandmem._errors import ModelBehaviorError, UserError
from sandmem.models.openai_chat import chat_messages, output_items


def call(call_id: str, name: str = "f", arguments: str = "{}") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def result(call_id: str, output: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def test_instructions_and_developer_become_system() -> None:
    messages = chat_messages(
        "Be kind.",
        [
            {"role": "developer", "content": "Prefer metric units."},
            {"type": "message", "role": "user", "content": "hi"},
        ],
    )
    assert messages == [
        {"role": "system", "content": "Be kind."},
        {"role": "system", "content": "Prefer metric units."},
        {"role": "user", "content": "hi"},
    ]


def test_consecutive_calls_join_the_assistant_text_before_them() -> None:
    messages = chat_messages(
        None,
        [
            {"role": "user", "content": "go"},
            {"type": "message", "role": "assistant", "content": "Checking both."},
            call("c1", "a", '{"x": 1}'),
            call("c2", "b"),
            result("c1", "one"),
            result("c2", "two"),
            {"type": "message", "role": "assistant", "content": "Done."},
        ],
    )
    assert messages == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "a", "arguments": '{"x": 1}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {"role": "assistant", "content": "Done."},
    ]


def test_calls_after_a_tool_output_start_a_new_assistant_message() -> None:
    messages = chat_messages(None, [call("c1"), result("c1", "x"), call("c2")])
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant"]
    assert messages[0]["content"] is None
    assert messages[2]["tool_calls"][0]["id"] == "c2"


def test_images_follow_the_whole_group_of_tool_messages() -> None:
    img = {"type": "input_image", "image_url": "https://img.test/a.png", "detail": "low"}
    messages = chat_messages(
        None,
        [
            call("c1"),
            call("c2"),
            result("c1", [img]),
            result("c2", "plain"),
            {"role": "user", "content": "ok"},
        ],
    )
    assert [m["role"] for m in messages] == ["assistant", "tool", "tool", "user", "user"]
    assert "image" in messages[1]["content"]
    assert messages[3]["content"] == [
        {"type": "image_url", "image_url": {"url": "https://img.test/a.png", "detail": "low"}}
    ]


def test_user_content_parts_and_assistant_parts() -> None:
    messages = chat_messages(
        None,
        [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is this?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AA"},
                ],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "a dot"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
        ],
    )
    assert messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
            ],
        },
        {"role": "assistant", "content": "a dot"},
    ]


def test_unsupported_items_are_refused_with_a_hint() -> None:
    with pytest.raises(UserError, match="Responses API"):
        chat_messages(None, [{"type": "web_search_call", "id": "ws_1"}])
    with pytest.raises(UserError, match="input_file"):
        chat_messages(None, [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}])


def completion(message: dict[str, Any], choices: bool = True) -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]
            if choices
            else [],
        }
    )


def test_output_text_and_calls_keep_ids() -> None:
    items = output_items(
        "m",
        completion(
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": ""}}
                ],
            }
        ),
    )
    assert items == [
        {"type": "message", "role": "assistant", "content": "Let me check."},
        {"type": "function_call", "call_id": "call_9", "name": "f", "arguments": "{}"},
    ]


def test_missing_call_ids_are_generated_and_round_trip() -> None:
    items = output_items(
        "m",
        completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            }
        ),
    )
    [item] = items
    assert item["call_id"].startswith("call_")
    messages = chat_messages(None, [item, result(item["call_id"], "ok")])
    assert messages[0]["tool_calls"][0]["id"] == messages[1]["tool_call_id"] == item["call_id"]


def test_no_choices_is_a_behavior_error() -> None:
    with pytest.raises(ModelBehaviorError, match="no choices"):
        output_items("m", completion({}, choices=False))
