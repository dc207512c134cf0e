"""The model seam: one abstract async request method, and the provider that names models."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from sandmem._items import Item
from sandmem._settings import ModelSettings
from sandmem._usage import Usage


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


@dataclass
class ModelResponse:
    """The model's output items (Responses format) and what the request cost."""

    output: list[Item]
    usage: Usage = field(default_factory=Usage)
    response_id: str | None = None


class Model(abc.ABC):
    """A language model. Implementations translate their backend's errors into
    ``ModelRequestError`` / ``ModelBehaviorError``."""

    #: a name for logs and error messages
    name: str = "model"

    @abc.abstractmethod
    async def get_response(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and return the model's output items."""


class ModelProvider(abc.ABC):
    """Resolves a model name (``None`` = the provider's default) to a ``Model``."""

    @abc.abstractmethod
    def get_model(self, name: str | None) -> Model: ...

    async def aclose(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release clients the provider opened (a no-op unless overridden)."""
