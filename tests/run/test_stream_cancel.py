"""Cancelling a streamed run (``RunResultStreaming.cancel``), the reference SDK's way: every
order of ``immediate`` and ``after_turn``, before iterating and while streaming, ends the
event stream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sandmem import Agent, Runner
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel

#: a guard against a stream that never ends (not a bound on how fast it ends)
HANG_GUARD_S = 60.0


async def _never(request: ModelRequest) -> str:
    await asyncio.Event().wait()
    return "never"


@pytest.mark.parametrize(
    "modes",
    [["immediate"], ["after_turn", "immediate"], ["immediate", "immediate"]],
)
async def test_cancel_before_iterating_ends_the_stream(modes: list[str]) -> None:
    result = Runner.run_streamed(Agent(name="a", model=FunctionModel(_never)), "go")
    for mode in modes:
        result.cancel(mode)  # type: ignore[arg-type]

    async def drain() -> list[Any]:
        return [event async for event in result.stream_events()]

    await asyncio.wait_for(drain(), HANG_GUARD_S)
    assert result.is_complete


async def test_after_turn_then_immediate_while_streaming_ends_the_stream() -> None:
    started = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    result = Runner.run_streamed(Agent(name="a", model=FunctionModel(slow)), "go")

    async def drain() -> None:
        async for _ in result.stream_events():
            pass

    consumer = asyncio.create_task(drain())
    await asyncio.wait_for(started.wait(), HANG_GUARD_S)
    result.cancel("after_turn")
    result.cancel("immediate")
    await asyncio.wait_for(consumer, HANG_GUARD_S)
    assert result.is_complete
    result.cancel("immediate")  # a finished run ignores further cancels
