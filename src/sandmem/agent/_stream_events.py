"""What a run emits, as small dataclasses with a ``type`` literal.

Two families, both produced by the one run loop (``run/_loop.py``) through one emit point:

- **stream events**, public, the reference's shapes: ``RawResponsesStreamEvent`` (whatever the
  model streamed, e.g. ``response.output_text.delta`` events with a ``delta``),
  ``RunItemStreamEvent`` (an item was created: ``message_output_created``, ``tool_called``,
  ``tool_output``, ``reasoning_item_created``; ``item`` is a typed view from
  ``agent/_run_items.py``) and ``AgentUpdatedStreamEvent`` (an agent starts).
  ``RunResultStreaming.stream_events()`` yields these.
- **lifecycle events**, internal: agent start/end, model call start/end, tool start/end, run
  end. Hooks are driven by them; a tracer can listen to them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from sandmem._items import Item
from sandmem.agent._run_items import RunItem, RunItemType, as_run_item
from sandmem.models._base import ResponseTextDeltaEvent as ResponseTextDeltaEvent

if TYPE_CHECKING:
    from sandmem.agent._agent import Agent
    from sandmem.agent._context import RunContextWrapper, RunOutcome, ToolContext
    from sandmem.agent._tools import FunctionTool
    from sandmem.models._base import ModelRequest, ModelResponse

RunItemEventName = Literal[
    "message_output_created", "tool_called", "tool_output", "reasoning_item_created"
]

_EVENT_NAMES: dict[RunItemType, RunItemEventName] = {
    "message_output_item": "message_output_created",
    "tool_call_item": "tool_called",
    "tool_call_output_item": "tool_output",
    "reasoning_item": "reasoning_item_created",
}


def run_item_event(agent: Agent, item: Item) -> RunItemStreamEvent | None:
    """The stream event for a new transcript item (``None`` for kinds without one); the event
    carries the item's typed view (``agent/_run_items.py``)."""
    view = as_run_item(item, agent)
    if not isinstance(view, RunItem):
        return None
    return RunItemStreamEvent(name=_EVENT_NAMES[view.type], item=view)


# --- stream events (public) ---------------------------------------------------------------


@dataclass
class RawResponsesStreamEvent:
    """An event as the model streamed it (``data.type`` names it; text deltas carry
    ``data.delta``)."""

    data: Any
    type: Literal["raw_response_event"] = "raw_response_event"


@dataclass
class RunItemStreamEvent:
    """A transcript item was created."""

    name: RunItemEventName
    item: RunItem
    type: Literal["run_item_stream_event"] = "run_item_stream_event"


@dataclass
class AgentUpdatedStreamEvent:
    """An agent starts running (the first event of every run)."""

    new_agent: Agent
    type: Literal["agent_updated_stream_event"] = "agent_updated_stream_event"


StreamEvent: TypeAlias = RawResponsesStreamEvent | RunItemStreamEvent | AgentUpdatedStreamEvent


# --- lifecycle events (internal) ----------------------------------------------------------


@dataclass
class AgentStartEvent:
    context: RunContextWrapper[Any]
    agent: Agent
    type: Literal["agent_start"] = "agent_start"


@dataclass
class AgentEndEvent:
    context: RunContextWrapper[Any]
    agent: Agent
    output: Any
    type: Literal["agent_end"] = "agent_end"


@dataclass
class LLMStartEvent:
    context: RunContextWrapper[Any]
    agent: Agent
    request: ModelRequest
    turn: int
    type: Literal["llm_start"] = "llm_start"


@dataclass
class LLMEndEvent:
    context: RunContextWrapper[Any]
    agent: Agent
    request: ModelRequest
    response: ModelResponse
    turn: int
    type: Literal["llm_end"] = "llm_end"


@dataclass
class ToolStartEvent:
    context: ToolContext[Any]
    agent: Agent
    tool: FunctionTool
    type: Literal["tool_start"] = "tool_start"


@dataclass
class ToolEndEvent:
    context: ToolContext[Any]
    agent: Agent
    tool: FunctionTool
    result: Any
    error: BaseException | None = None
    type: Literal["tool_end"] = "tool_end"


@dataclass
class RunEndEvent:
    """The last event of every run that got past its checks, completed or not."""

    context: RunContextWrapper[Any]
    agent: Agent
    outcome: RunOutcome
    type: Literal["run_end"] = "run_end"


LifecycleEvent: TypeAlias = (
    AgentStartEvent
    | AgentEndEvent
    | LLMStartEvent
    | LLMEndEvent
    | ToolStartEvent
    | ToolEndEvent
    | RunEndEvent
)
RunEvent: TypeAlias = StreamEvent | LifecycleEvent
