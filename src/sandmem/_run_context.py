"""What a run exposes to a sandbox agent's capabilities: its context before it starts and its
outcome after.

``SandboxRunContext`` is sandmem's internal, capability-facing view of one run (the live
``sandbox`` session, the conversation ``session``, the input). It is not the reference's
``RunContextWrapper``, which carries the user's ``context`` object to tools and hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sandmem._items import Item

if TYPE_CHECKING:
    from sandmem._agent import Agent
    from sandmem._run_config import RunConfig
    from sandmem._session import Session
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
