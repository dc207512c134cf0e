"""The run loop with the deterministic FunctionModel (no network)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from sandmem import (
    Agent,
    MaxTurnsExceeded,
    ModelBehaviorError,
    RunConfig,
    Runner,
    SQLiteSession,
    UserError,
    function_tool,
)
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel, text, tool_call, tool_outputs


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@function_tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


def _script(*turns: list[dict[str, object]] | str) -> FunctionModel:
    """A model that answers turn k with ``turns[k]``."""

    def fn(request: ModelRequest) -> list[dict[str, object]] | str:
        return turns[len(model.requests) - 1]

    model = FunctionModel(fn)
    return model


async def test_tool_calls_then_final_answer() -> None:
    model = _script(
        [tool_call("add", {"a": 2, "b": 3}, "c1"), tool_call("add", {"a": 1, "b": 1}, "c2")],
        "done",
    )
    agent = Agent(name="calc", instructions="Add things.", model=model, tools=[add])
    result = await Runner.run(agent, "add please")
    assert result.final_output == "done"
    outputs = {o["call_id"]: o["output"] for o in tool_outputs(model.requests[1])}
    assert outputs == {"c1": "5", "c2": "2"}
    assert model.requests[0].instructions == "Add things."
    assert [t.name for t in model.requests[0].tools] == ["add"]
    assert result.usage.requests == 2
    assert result.usage.input_tokens > 0
    assert [i["type"] for i in result.new_items] == [
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
    ]
    # a string input is one user message in the reference's shape: no "type" key
    assert result.to_input_list()[0] == {"content": "add please", "role": "user"}


async def test_tool_calls_in_one_turn_run_concurrently() -> None:
    started: list[str] = []
    release = asyncio.Event()

    @function_tool
    async def wait(tag: str) -> str:
        """Wait for the other call."""
        started.append(tag)
        if len(started) == 2:
            release.set()
        await asyncio.wait_for(release.wait(), timeout=2)
        return tag

    model = _script([tool_call("wait", {"tag": "a"}), tool_call("wait", {"tag": "b"})], "ok")
    result = await Runner.run(Agent(name="w", model=model, tools=[wait]), "go")
    assert result.final_output == "ok"
    assert sorted(started) == ["a", "b"]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (tool_call("explode", {"reason": "x"}), "Error: RuntimeError: boom: x"),
        (tool_call("nope", {}), "Error: UnknownTool: there is no tool named 'nope'"),
        (tool_call("add", "{not json"), "Error: ToolArgumentsError: arguments are not valid"),
        (tool_call("add", {"a": "x", "b": 1}), "Error: ToolArgumentsError: invalid arguments"),
        (tool_call("add", {"a": 1}), "Error: ToolArgumentsError: invalid arguments"),
    ],
)
async def test_tool_errors_become_outputs_and_run_continues(
    call: dict[str, object], expected: str
) -> None:
    model = _script([call], "recovered")
    result = await Runner.run(Agent(name="e", model=model, tools=[add, explode]), "hi")
    assert result.final_output == "recovered"
    (output,) = tool_outputs(model.requests[1])
    assert output["output"].startswith(expected)


async def test_max_turns_exceeded_carries_partial_items() -> None:
    model = FunctionModel(lambda r: [tool_call("add", {"a": 1, "b": 1})])
    with pytest.raises(MaxTurnsExceeded) as info:
        await Runner.run(Agent(name="loop", model=model, tools=[add]), "go", max_turns=3)
    assert len(model.requests) == 3
    assert [i["type"] for i in info.value.items].count("function_call_output") == 3


async def test_empty_model_turn_ends_a_text_run_with_empty_output() -> None:
    model = FunctionModel(lambda r: [])
    result = await Runner.run(Agent(name="x", model=model), "go")
    assert result.final_output == ""
    assert len(model.requests) == 1


async def test_empty_model_turn_is_model_behavior_error_for_structured_output() -> None:
    class Answer(BaseModel):
        value: int

    model = FunctionModel(lambda r: [])
    with pytest.raises(ModelBehaviorError, match="structured output"):
        await Runner.run(Agent(name="x", model=model, output_type=Answer), "go")


async def test_bad_max_turns_is_user_error() -> None:
    with pytest.raises(UserError):
        await Runner.run(Agent(name="x", model=FunctionModel(lambda r: "y")), "go", max_turns=0)


async def test_run_config_model_overrides_agent_model() -> None:
    used = FunctionModel(lambda r: "from config")
    unused = FunctionModel(lambda r: "from agent")
    result = await Runner.run(Agent(name="x", model=unused), "go", run_config=RunConfig(used))
    assert result.final_output == "from config"
    assert unused.requests == []


async def test_two_runs_share_sqlite_session_history() -> None:
    model = FunctionModel(lambda r: f"seen {len(r.input)} items")
    agent = Agent(name="chat", model=model)
    session = SQLiteSession("conv-1")
    await Runner.run(agent, "first question", session=session)
    await Runner.run(agent, "second question", session=session)
    second = model.requests[1].input
    assert [i.get("content") for i in second] == [
        "first question",
        "seen 1 items",
        "second question",
    ]
    assert len(await session.get_items()) == 4
    assert (await session.get_items())[0] == {"content": "first question", "role": "user"}
    assert (await session.pop_item()) == {
        "type": "message",
        "role": "assistant",
        "content": "seen 3 items",
    }
    assert len(await session.get_items(limit=2)) == 2
    await session.clear_session()
    assert await session.get_items() == []


def test_run_sync_returns_result() -> None:
    result = Runner.run_sync(Agent(name="s", model=FunctionModel(lambda r: "sync")), "go")
    assert result.final_output == "sync"


async def test_run_sync_inside_loop_is_user_error() -> None:
    with pytest.raises(UserError):
        Runner.run_sync(Agent(name="s", model=FunctionModel(lambda r: "x")), "go")


def test_file_backed_session_survives_a_new_process(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    session = SQLiteSession("thread-7", db)
    Runner.run_sync(
        Agent(name="a", model=FunctionModel(lambda r: "answer one")), "q1", session=session
    )
    session.close()
    code = (
        "import asyncio, json, sys\n"
        "from sandmem import SQLiteSession\n"
        f"s = SQLiteSession('thread-7', {str(db)!r})\n"
        "print(json.dumps(asyncio.run(s.get_items())))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    items = json.loads(out.stdout)
    assert [i["content"] for i in items] == ["q1", "answer one"]


async def test_sqlite_session_concurrent_adds_are_all_kept() -> None:
    session = SQLiteSession("c")
    await asyncio.gather(*(session.add_items([text(f"m{i}")]) for i in range(50)))
    assert len(await session.get_items()) == 50


async def test_usage_has_one_entry_per_request() -> None:
    def fn(request: ModelRequest) -> Any:
        return "done" if tool_outputs(request) else [tool_call("add", {"a": 1, "b": 2})]

    result = await Runner.run(Agent(name="u", model=FunctionModel(fn), tools=[add]), "go")
    entries = result.usage.request_usage_entries
    assert len(entries) == result.usage.requests == 2
    assert sum(e.input_tokens for e in entries) == result.usage.input_tokens
    assert sum(e.total_tokens for e in entries) == result.usage.total_tokens
