"""Cutting an ingested conversation into run segments, one per user turn. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sandmem._items import Item, item_kind, message_text
from sandmem.memory.ingestion._model import Event
from sandmem.memory.rollouts import NO_OUTPUT, segment


@dataclass
class Draft:
    """The events of one turn: the user messages that opened it (``input``), then what the
    agent did (``generated``). A draft of an ingest that starts mid-turn has no input."""

    input: list[Item] = field(default_factory=list)
    generated: list[Item] = field(default_factory=list)
    first_time: str | None = None
    last_time: str | None = None
    error: str | None = None
    error_type: str | None = None
    interrupted: bool = False
    last_pos: int = -1
    last_end: int | None = None

    def add(self, event: Event) -> None:
        if event.item is not None:
            if event.turn and not self.generated:
                self.input.append(event.item)
            else:
                self.generated.append(event.item)
            if item_kind(event.item) == "message" and event.item.get("role") == "assistant":
                self.error = self.error_type = None  # the agent went on: a retried error
        if event.error is not None:
            self.error, self.error_type = event.error, event.error_type
        self.interrupted = self.interrupted or event.interrupted
        if event.time is not None:
            self.first_time = self.first_time or event.time
            self.last_time = event.time
        self.last_pos = max(self.last_pos, event.pos)
        if event.end is not None:
            self.last_end = event.end

    @property
    def empty(self) -> bool:
        return not self.input and not self.generated

    @property
    def terminal_state(self) -> str:
        if self.error is not None:
            return "failed"
        if self.interrupted:
            return "interrupted"
        last = self.generated[-1] if self.generated else None
        if last is not None and item_kind(last) == "message" and last.get("role") == "assistant":
            return "completed"
        return "interrupted"


def drafts(events: Iterable[Event]) -> list[Draft]:
    """One draft per user turn: a user message after the agent has acted starts a new one
    (unless it shares its source position with what came before)."""
    found: list[Draft] = []
    for event in events:
        # a turn starts only on a position of its own: the position an ingest records up to
        # is a whole line (or row), so two segments never share one
        new_turn = event.turn and found and found[-1].generated and event.pos != found[-1].last_pos
        if not found or new_turn:
            found.append(Draft())
        found[-1].add(event)
    return found


def segment_of(
    draft: Draft,
    rollout_id: str,
    conversation_key: str | None,
    source: dict[str, Any],
    fallback_time: str,
) -> dict[str, Any]:
    """The run segment recorded for a draft; ``updated_at`` is the time of its last event."""
    state = draft.terminal_state
    return segment(
        rollout_id,
        updated_at=draft.last_time or fallback_time,
        conversation_key=conversation_key,
        input=draft.input,
        generated_items=draft.generated,
        final_output=message_text(draft.generated[-1]) if state == "completed" else NO_OUTPUT,
        terminal_state=state,
        exception_type=draft.error_type if draft.error is not None else None,
        exception_message=draft.error,
        source=source,
    )
