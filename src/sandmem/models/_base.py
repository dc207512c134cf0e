"""The model seam: one abstract async request method, and the provider that names models."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from sandmem._items import Item, content_texts, item_kind
from sandmem._settings import ModelSettings
from sandmem._usage import Usage


@dataclass
class ResponseTextDeltaEvent:
    """A text delta, shaped like the Responses API's ``response.output_text.delta`` event.
    Models that cannot stream get these from ``Model.stream_response``'s default."""

    delta: str
    item_id: str = ""
    output_index: int = 0
    content_index: int = 0
    sequence_number: int = 0
    type: Literal["response.output_text.delta"] = "response.output_text.delta"


@dataclass(frozen=True)
class ToolSpec:
    """A function tool as the model sees it."""

    name: str
    description: str
    params_json_schema: dict[str, Any]
    strict: bool = False


@dataclass(frozen=True)
class OutputSchema:
    """A JSON-schema response format for structured output (``strict`` mode by default)."""

    name: str
    json_schema: dict[str, Any]
    strict: bool = True


@dataclass(frozen=True)
class ModelRequest:
    """One request to a model: instructions, the transcript so far, tools, output format."""

    instructions: str | None
    input: list[Item]
    tools: list[ToolSpec] = field(default_factory=list)
    output_schema: OutputSchema | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    #: server-side state to continue from (Responses API); ``input`` then holds only new items
    previous_response_id: str | None = None
    #: an OpenAI conversation id (``conv_...``) for the Responses API's ``conversation``
    conversation_id: str | None = None
    #: a stored prompt of the Responses API (``{"id", "version", "variables"}``)
    prompt: dict[str, Any] | None = None


@dataclass
class ModelResponse:
    """The model's output items (Responses format) and what the request cost."""

    output: list[Item]
    usage: Usage = field(default_factory=Usage)
    response_id: str | None = None
    #: the model that answered, as the server names it (for tracing; ``None``: not reported)
    model: str | None = None
    #: why generation stopped, per choice, as the server says (``stop``, ``tool_calls``, ...)
    finish_reasons: list[str] | None = None


class Model(abc.ABC):
    """A language model. Implementations translate their backend's errors into
    ``ModelRequestError`` / ``ModelBehaviorError``.

    ``get_response`` is the one required method. ``stream_response`` is optional: its default
    calls ``get_response`` and replays the answer's text as delta events, so every model can
    serve ``Runner.run_streamed``.
    """

    #: a name for logs and error messages
    name: str = "model"

    @abc.abstractmethod
    async def get_response(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and return the model's output items."""

    async def stream_response(self, request: ModelRequest) -> AsyncIterator[Any]:
        """Send ``request``, yielding raw stream events as they arrive and, last, exactly one
        ``ModelResponse`` (the whole answer, as ``get_response`` would return it).

        Text deltas are objects with ``type == "response.output_text.delta"`` and ``delta``.
        """
        response = await self.get_response(request)
        sequence = 0
        for index, item in enumerate(response.output):
            if item_kind(item) != "message" or item.get("role") != "assistant":
                continue
            texts = [t for t in content_texts(item.get("content")) if t]
            for part_index, text in enumerate(texts):
                yield ResponseTextDeltaEvent(
                    delta=text,
                    item_id=str(item.get("id", "")),
                    output_index=index,
                    content_index=part_index,
                    sequence_number=sequence,
                )
                sequence += 1
        yield response


class ModelProvider(abc.ABC):
    """Resolves a model name (``None`` = the provider's default) to a ``Model``."""

    @abc.abstractmethod
    def get_model(self, name: str | None) -> Model: ...

    async def aclose(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release clients the provider opened (a no-op unless overridden)."""
