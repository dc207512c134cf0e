"""SPEC §3.4: rollout ids and run segments."""

from __future__ import annotations

import json
import re

import pytest

from sandmem import Agent, RunConfig, SQLiteSession
from sandmem.agent._context import RunOutcome, SandboxRunContext
from sandmem.memory import validate_rollout_id
from sandmem.memory.rollouts import (
    build_segment,
    file_safe_rollout_id,
    filter_items,
    resolve_rollout_id,
    segment_line,
)
from sandmem.testing import FunctionModel


@pytest.mark.parametrize("value", ["a", "A1", "run-1.2_x", "x" * 128, "  padded  "])
def test_valid_rollout_ids(value: str) -> None:
    assert validate_rollout_id(value) == value.strip()


@pytest.mark.parametrize(
    "value", ["", " ", "-lead", ".hidden", "a/b", "../x", "a b", "x" * 129, "é", "a:b"]
)
def test_invalid_rollout_ids(value: str) -> None:
    with pytest.raises(ValueError):
        validate_rollout_id(value)


def test_file_safe_mapping_is_deterministic_and_valid() -> None:
    key = "alice@example.com:thread 7"
    mapped = file_safe_rollout_id(key)
    assert mapped == file_safe_rollout_id(key)
    assert validate_rollout_id(mapped) == mapped
    assert re.fullmatch(r"alice-example\.com-thread-7--[0-9a-f]{16}", mapped)
    assert file_safe_rollout_id("a/b") != file_safe_rollout_id("a:b")
    assert validate_rollout_id(file_safe_rollout_id("../../x" * 40))


def _ctx(**kwargs: object) -> SandboxRunContext:
    agent = Agent(name="a", model=FunctionModel(lambda r: "x"))
    defaults: dict[str, object] = {"agent": agent, "input": [], "run_config": RunConfig()}
    defaults.update(kwargs)
    return SandboxRunContext(**defaults)  # type: ignore[arg-type]


def test_resolution_order() -> None:
    session = SQLiteSession("sess-1")
    config = RunConfig(group_id="group-1")
    both = _ctx(conversation_id="conv-1", session=session, run_config=config)
    assert resolve_rollout_id(both) == ("conv-1", None)
    assert resolve_rollout_id(_ctx(session=session, run_config=config)) == ("sess-1", None)
    assert resolve_rollout_id(_ctx(run_config=config)) == ("group-1", None)
    fresh, key = resolve_rollout_id(_ctx())
    assert re.fullmatch(r"run-[0-9a-f]{32}", fresh) and key is None
    assert resolve_rollout_id(_ctx())[0] != fresh


def test_unsafe_ids_are_mapped_and_original_kept() -> None:
    rid, key = resolve_rollout_id(_ctx(conversation_id="alice@example.com:thread 7"))
    assert key == "alice@example.com:thread 7"
    assert rid == file_safe_rollout_id(key)


def test_empty_conversation_id_is_refused() -> None:
    with pytest.raises(ValueError):
        resolve_rollout_id(_ctx(conversation_id="  "))


def test_filter_drops_system_developer_and_reasoning() -> None:
    items = [
        {"role": "system", "content": "s"},
        {"type": "message", "role": "developer", "content": "d"},
        {"type": "reasoning", "summary": []},
        {"role": "user", "content": "u"},
        {"type": "message", "role": "assistant", "content": "a"},
        {"type": "function_call", "call_id": "c", "name": "t", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "o"},
    ]
    kept = filter_items(items)
    assert [i.get("role") or i["type"] for i in kept] == [
        "user",
        "assistant",
        "function_call",
        "function_call_output",
    ]


def test_segment_shape_for_completed_and_failed_runs() -> None:
    ctx = _ctx(input=[{"role": "user", "content": "hi"}, {"role": "system", "content": "x"}])
    done = RunOutcome(
        [{"type": "message", "role": "assistant", "content": "yo"}],
        "completed",
        final_output="yo",
        has_final_output=True,
    )
    segment = build_segment(ctx, done, "r1", None, updated_at="2026-01-01T00:00:00.000Z")
    assert segment == {
        "updated_at": "2026-01-01T00:00:00.000Z",
        "rollout_id": "r1",
        "input": [{"role": "user", "content": "hi"}],
        "generated_items": [{"type": "message", "role": "assistant", "content": "yo"}],
        "final_output": "yo",
        "terminal_metadata": {
            "terminal_state": "completed",
            "exception_type": None,
            "exception_message": None,
            "has_final_output": True,
        },
    }
    failed = RunOutcome([], "failed", exception=RuntimeError("model down"))
    seg = build_segment(ctx, failed, "r1", "orig key")
    assert "final_output" not in seg and seg["conversation_key"] == "orig key"
    assert seg["terminal_metadata"]["exception_type"] == "RuntimeError"
    assert seg["terminal_metadata"]["exception_message"] == "model down"
    line = segment_line(seg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["rollout_id"] == "r1"
