"""``Runner``: the front end of the run loop, and what a run returns.

``Runner.run``, ``Runner.run_sync`` and ``Runner.run_streamed`` are three views of one core,
``_run_loop.execute``: ``run`` awaits it, ``run_sync`` runs ``run`` on a new event loop, and
``run_streamed`` starts it as a task whose events feed ``RunResultStreaming.stream_events()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

from sandmem._errors import UserError
from sandmem._items import Item, normalize_input
from sandmem._usage import Usage
from sandmem.agent._agent import Agent
from sandmem.agent._context import RunContextWrapper
from sandmem.agent._hooks import RunHooks
from sandmem.agent._run_config import RunConfig
from sandmem.agent._session import Session
from sandmem.agent._stream_events import RunEvent, StreamEvent
from sandmem.models._base import ModelResponse
from sandmem.run._loop import (
    STREAM_EVENT_TYPES,
    RunProgress,
    RunSpec,
    TurnCancelled,
    execute,
)

T = TypeVar("T")


class _ResultMixin:
    input: str | list[Item]
    new_items: list[Item]
    final_output: Any

    def final_output_as(self, cls: type[T], raise_if_incorrect_type: bool = False) -> T:
        """``final_output`` typed as ``cls`` (checked when ``raise_if_incorrect_type``)."""
        if raise_if_incorrect_type and not isinstance(self.final_output, cls):
            raise TypeError(f"final output is {type(self.final_output).__name__}, not {cls}")
        return cast(T, self.final_output)

    def to_input_list(self) -> list[Item]:
        """This run's input followed by its new items: the input of a follow-up run."""
        return normalize_input(self.input) + [dict(item) for item in self.new_items]


@dataclass
class RunResult(_ResultMixin):
    """What a run produced. ``new_items`` are the items of this run only (model outputs and
    tool outputs); ``to_input_list()`` gives input + new items for a follow-up run;
    ``raw_responses`` are the model's responses, one per model call."""

    input: str | list[Item]
    new_items: list[Item]
    final_output: Any
    last_agent: Agent
    usage: Usage = field(default_factory=Usage)
    raw_responses: list[ModelResponse] = field(default_factory=list)
    context_wrapper: RunContextWrapper[Any] = field(default_factory=lambda: RunContextWrapper(None))

    @property
    def last_response_id(self) -> str | None:
        return self.raw_responses[-1].response_id if self.raw_responses else None


class RunResultStreaming(_ResultMixin):
    """A run in progress. Iterate ``stream_events()`` to follow it; when that iteration ends
    the run is complete (``is_complete``) and ``final_output``, ``new_items`` and ``usage`` are
    final. An error of the run is raised from ``stream_events()`` once its events are out."""

    def __init__(self, spec: RunSpec, progress: RunProgress) -> None:
        self.input = spec.input
        self.max_turns = spec.max_turns
        self._progress = progress
        self._queue: asyncio.Queue[StreamEvent | None] = asyncio.Queue()
        self._error: BaseException | None = None
        self._cancelled = False
        self.is_complete = False
        spec.listeners.append(self._listen)
        self._task = asyncio.get_running_loop().create_task(self._drive(spec))
        # the end marker comes from the task's completion, not from its body: a task cancelled
        # before its first step never runs ``_drive``'s ``finally``, yet the stream must end
        self._task.add_done_callback(self._task_done)

    async def _listen(self, event: RunEvent) -> None:
        if event.type in STREAM_EVENT_TYPES:
            self._queue.put_nowait(cast(StreamEvent, event))

    async def _drive(self, spec: RunSpec) -> None:
        try:
            await execute(spec, self._progress)
        except TurnCancelled:
            pass
        except asyncio.CancelledError:
            if not self._cancelled:
                raise
        except Exception as exc:
            self._error = exc

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.is_complete = True
        self._queue.put_nowait(None)

    async def stream_events(self) -> AsyncIterator[StreamEvent]:
        """The run's stream events as they happen (types: ``agent/_stream_events.py``)."""
        while True:
            event = await self._queue.get()
            if event is None:
                break
            yield event
        await asyncio.wait([self._task])
        if self._task.cancelled() and not self._cancelled:
            raise asyncio.CancelledError()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def cancel(self, mode: Literal["immediate", "after_turn"] = "immediate") -> None:
        """Stop the run: at once, or after the current turn's tool calls. Its memory is recorded
        with ``terminal_state`` ``cancelled``; ``stream_events()`` then ends without error."""
        if mode not in ("immediate", "after_turn"):
            raise UserError("cancel(mode=...) takes 'immediate' or 'after_turn'")
        if self.is_complete or self._task.done():
            return
        self._cancelled = True
        if mode == "after_turn":
            self._progress.cancel_after_turn = True
        else:
            self._task.cancel()

    @property
    def new_items(self) -> list[Item]:  # type: ignore[override]
        return self._progress.new_items

    @property
    def final_output(self) -> Any:
        return self._progress.final_output

    @property
    def usage(self) -> Usage:
        return self._progress.usage

    @property
    def raw_responses(self) -> list[ModelResponse]:
        return self._progress.raw_responses

    @property
    def current_agent(self) -> Agent:
        return self._progress.current_agent

    @property
    def last_agent(self) -> Agent:
        return self._progress.current_agent

    @property
    def current_turn(self) -> int:
        return self._progress.current_turn

    @property
    def context_wrapper(self) -> RunContextWrapper[Any]:
        return self._progress.context_wrapper

    @property
    def last_response_id(self) -> str | None:
        return self._progress.last_response_id

    def __repr__(self) -> str:
        state = "complete" if self.is_complete else f"turn {self.current_turn}"
        return f"RunResultStreaming({self.current_agent.name!r}, {state})"


def _spec(
    starting_agent: Agent | None,
    agent: Agent | None,
    input: str | list[Item] | None,
    run_config: RunConfig | dict[str, Any] | None,
    max_turns: int | None,
    **rest: Any,
) -> RunSpec:
    """Check the arguments of every ``Runner`` view, before anything runs."""
    if starting_agent is not None and agent is not None and starting_agent is not agent:
        raise UserError("pass the agent once: as starting_agent (first argument) or agent=")
    chosen = starting_agent if starting_agent is not None else agent
    if not isinstance(chosen, Agent):
        raise UserError(f"Runner needs an Agent as its first argument, got {chosen!r}")
    if input is None:
        raise UserError("Runner needs an input: a string or a list of items")
    if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
        raise UserError("max_turns must be at least 1 (or None for no limit)")
    if isinstance(run_config, dict):
        run_config = RunConfig(**run_config)
    return RunSpec(
        agent=chosen,
        input=input,
        max_turns=max_turns,
        run_config=run_config or RunConfig(),
        result_factory=_result,
        **rest,
    )


def _result(spec: RunSpec, progress: RunProgress, final: Any) -> RunResult:
    """The ``RunResult`` of a finished run (also of a nested run, for ``Agent.as_tool``)."""
    return RunResult(
        input=spec.input,
        new_items=progress.new_items,
        final_output=final,
        last_agent=progress.current_agent,
        usage=progress.usage,
        raw_responses=progress.raw_responses,
        context_wrapper=progress.context_wrapper,
    )


def _progress(spec: RunSpec) -> RunProgress:
    return RunProgress(context_wrapper=RunContextWrapper(spec.context), current_agent=spec.agent)


class Runner:
    """Runs agents: ``run`` (async), ``run_sync`` (blocking), ``run_streamed`` (events)."""

    @staticmethod
    async def run(
        starting_agent: Agent | None = None,
        input: str | list[Item] | None = None,
        *,
        context: Any = None,
        max_turns: int | None = 10,
        hooks: RunHooks[Any] | None = None,
        run_config: RunConfig | dict[str, Any] | None = None,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        session: Session | None = None,
        agent: Agent | None = None,
    ) -> RunResult:
        """Run ``starting_agent`` on ``input`` until a final answer.

        ``context`` (any object) reaches tools, dynamic instructions and ``hooks`` through a
        ``RunContextWrapper``. ``session`` stores the conversation's history; its
        ``session_id`` (or ``conversation_id``) names the memory conversation. Raises
        ``MaxTurnsExceeded`` at the turn limit, ``ModelBehaviorError`` for unusable model
        output, ``UserError`` for misuse (before the first model call). ``agent=`` is an alias
        of ``starting_agent``.
        """
        spec = _spec(
            starting_agent,
            agent,
            input,
            run_config,
            max_turns,
            context=context,
            hooks=hooks,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            session=session,
        )
        progress = _progress(spec)
        return _result(spec, progress, await execute(spec, progress))

    @staticmethod
    def run_sync(
        starting_agent: Agent | None = None,
        input: str | list[Item] | None = None,
        *,
        context: Any = None,
        max_turns: int | None = 10,
        hooks: RunHooks[Any] | None = None,
        run_config: RunConfig | dict[str, Any] | None = None,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        session: Session | None = None,
        agent: Agent | None = None,
    ) -> RunResult:
        """``run`` for code without an event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise UserError(
                "Runner.run_sync cannot be called from a running event loop; await Runner.run"
            )
        return asyncio.run(
            Runner.run(
                starting_agent,
                input,
                context=context,
                max_turns=max_turns,
                hooks=hooks,
                run_config=run_config,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                session=session,
                agent=agent,
            )
        )

    @staticmethod
    def run_streamed(
        starting_agent: Agent | None = None,
        input: str | list[Item] | None = None,
        context: Any = None,
        max_turns: int | None = 10,
        hooks: RunHooks[Any] | None = None,
        run_config: RunConfig | dict[str, Any] | None = None,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        session: Session | None = None,
        *,
        agent: Agent | None = None,
    ) -> RunResultStreaming:
        """Start a run and return at once; iterate ``stream_events()`` on the result to follow
        it (needs a running event loop). Model calls stream (``Model.stream_response``); the run
        does exactly what ``run`` does, memory recording included."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise UserError(
                "Runner.run_streamed needs a running event loop; call it from async code"
            ) from None
        spec = _spec(
            starting_agent,
            agent,
            input,
            run_config,
            max_turns,
            context=context,
            hooks=hooks,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            session=session,
            stream=True,
        )
        return RunResultStreaming(spec, _progress(spec))
