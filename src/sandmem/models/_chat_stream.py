"""Assembling a streamed Chat Completion: chunks in, Responses-style text delta events out, and
the whole answer at the end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseTextDeltaEvent

from sandmem._errors import ModelBehaviorError
from sandmem._items import Item
from sandmem._usage import Usage
from sandmem.models._base import ModelResponse

#: ``(text=, tool_calls=, reasoning=) -> items`` (``openai_chat.assemble_items``)
Assembler = Callable[..., list[Item]]


@dataclass
class _Call:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ChatStreamAccumulator:
    """Feed it each chunk (``add``); ``response`` gives the answer once the stream ended."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._id: str | None = None
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._usage = Usage(requests=1)
        self._sequence = 0
        self._chunks = 0
        self._served_by: str | None = None
        self._finish: list[str] = []

    def add(self, chunk: ChatCompletionChunk) -> list[Any]:
        """Take one chunk; return the raw events it gives (text deltas)."""
        self._chunks += 1
        self._id = self._id or chunk.id
        self._served_by = self._served_by or chunk.model
        if chunk.usage is not None:
            self._usage = Usage(
                requests=1,
                input_tokens=chunk.usage.prompt_tokens or 0,
                output_tokens=chunk.usage.completion_tokens or 0,
            )
        events: list[Any] = []
        for choice in chunk.choices[:1] if chunk.choices else []:
            delta = choice.delta
            if choice.finish_reason:
                self._finish.append(str(choice.finish_reason))
            reasoning = (delta.model_extra or {}).get("reasoning_content")
            if isinstance(reasoning, str):
                self._reasoning.append(reasoning)
            if delta.refusal:
                self._refusal.append(delta.refusal)
            if delta.content:
                self._text.append(delta.content)
                events.append(self._delta_event(delta.content))
            for call in delta.tool_calls or []:
                slot = self._calls.setdefault(call.index, _Call())
                slot.id = slot.id or call.id
                if call.function is not None:
                    slot.name += call.function.name or ""
                    slot.arguments.append(call.function.arguments or "")
        return events

    def _delta_event(self, text: str) -> ResponseTextDeltaEvent:
        event = ResponseTextDeltaEvent(
            type="response.output_text.delta",
            delta=text,
            item_id=self._id or "",
            output_index=0,
            content_index=0,
            logprobs=[],
            sequence_number=self._sequence,
        )
        self._sequence += 1
        return event

    def response(self, assemble: Assembler) -> ModelResponse:
        if self._chunks == 0:
            raise ModelBehaviorError(
                f"the Chat Completions stream for {self._model!r} ended without any chunk"
            )
        calls = [
            (slot.id, slot.name, "".join(slot.arguments)) for _, slot in sorted(self._calls.items())
        ]
        items = assemble(
            text="".join(self._text) or "".join(self._refusal),
            tool_calls=calls,
            reasoning="".join(self._reasoning) or None,
        )
        return ModelResponse(
            output=items,
            usage=self._usage,
            response_id=self._id,
            model=self._served_by,
            finish_reasons=self._finish or None,
        )
