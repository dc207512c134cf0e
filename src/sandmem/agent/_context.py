"""What a run exposes to a sandbox agent's capabilities: its context before it starts and its
outcome after.

``SandboxRunContext`` is sandmem's internal, capability-facing view of one run (the live
``sandbox`` session, the conversation ``session``, the input). It is not the reference's
``RunContextWrapper``, which carries the user's ``context`` object to tools and hooks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from sandmem._items import Item
from sandmem._usage import Usage

if TYPE_CHECKING:
    from sandmem.agent._agent import Agent
    from sandmem.agent._run_config import RunConfig
    from sandmem.agent._session import Session
    from sandmem.sandboxes._session import SandboxSession

TerminalState = Literal[
    "completed", "interrupted", "cancelled", "failed", "max_turns_exceeded", "guardrail_tripped"
]


@dataclass
class SandboxRunContext:
    """One run as capabilities see it. ``sandbox`` is the live sandbox session; ``session`` is
    the conversation history store passed to ``Runner.run`` (if any); ``input`` is this run's
    new input (without stored history); ``conversation_id`` is what the caller passed."""

    agent: Agent
    input: list[Item]
    run_config: RunConfig
    session: Session | None = None
    conversation_id: str | None = None
    sandbox: SandboxSession | None = None
    #: the caller's ``context`` and the run's usage (what tools and hooks receive)
    context_wrapper: RunContextWrapper[Any] | None = None
    #: free slots for capabilities to keep per-run state between start and end
    extras: dict[Any, Any] = field(default_factory=dict)


@dataclass
class RunOutcome:
    """How a run ended: the items it produced, its final output, and its terminal state."""

    new_items: list[Item]
    terminal_state: TerminalState
    final_output: Any = None
    has_final_output: bool = False
    exception: BaseException | None = None


TContext = TypeVar("TContext")


@dataclass(eq=False)
class RunContextWrapper(Generic[TContext]):
    """The caller's ``context`` object for one run, with the run's live ``usage``.

    ``Runner.run(..., context=obj)`` wraps ``obj`` here. Tools whose first parameter is typed
    ``RunContextWrapper[...]`` receive it (it is not part of their schema), dynamic
    instructions are called with it, and hooks get it as their first argument. sandmem never
    reads or copies ``context``: it is yours.
    """

    context: TContext
    usage: Usage = field(default_factory=Usage)


@dataclass(eq=False)
class ToolContext(RunContextWrapper[TContext]):
    """The run context as one function-tool call sees it: also the call's name, id and raw
    JSON arguments. ``run_nested`` (set by the run loop) runs another agent as a nested run of
    this call, for ``Agent.as_tool``."""

    tool_name: str = ""
    tool_call_id: str = ""
    tool_arguments: str = ""
    run_nested: Callable[..., Awaitable[Any]] | None = field(default=None, kw_only=True, repr=False)

    @classmethod
    def for_call(
        cls, wrapper: RunContextWrapper[TContext], name: str, call_id: str, arguments: str
    ) -> ToolContext[TContext]:
        return cls(wrapper.context, wrapper.usage, name, call_id, arguments)
