"""Agents: an LLM with instructions, tools and an optional structured output type."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sandmem._settings import ModelSettings
from sandmem._tools import FunctionTool
from sandmem.models._base import Model


@dataclass
class Agent:
    """An LLM with instructions and tools.

    ``model`` is a ``Model`` or a name resolved by the run's model provider (``None``: the
    provider's default). ``output_type`` (a pydantic model) asks for validated structured output.
    """

    name: str
    instructions: str | None = None
    model: str | Model | None = None
    model_settings: ModelSettings | dict[str, Any] | None = None
    tools: list[FunctionTool] = field(default_factory=list)
    output_type: type[Any] | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise TypeError("Agent.name must be a non-empty string")
        self.model_settings = ModelSettings.coerce(self.model_settings)
