"""Model settings shared by every model implementation."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

ReasoningEffort = Literal["minimal", "low", "medium", "high"]


class ModelSettings(BaseModel):
    """Per-request model settings.

    ``reasoning`` takes ``{"effort": "low" | "medium" | "high"}``. A dict of these fields is
    accepted wherever ``ModelSettings`` is (see :meth:`coerce`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float | None = None
    max_tokens: int | None = None
    reasoning: dict[str, Any] | None = None
    tool_choice: str | None = None
    extra_args: dict[str, Any] | None = None

    @classmethod
    def coerce(cls, value: ModelSettings | dict[str, Any] | None) -> ModelSettings:
        """Return ``value`` as ``ModelSettings`` (``None`` gives the defaults)."""
        if value is None:
            return cls()
        if isinstance(value, ModelSettings):
            return value
        if isinstance(value, dict):
            return cls.model_validate(value)
        raise TypeError(f"model settings must be ModelSettings or a dict, not {type(value)!r}")

    def merged(self, override: ModelSettings | None) -> ModelSettings:
        """Settings with every field that ``override`` sets taking precedence."""
        if override is None:
            return self
        data = self.model_dump()
        data.update(override.model_dump(exclude_none=True))
        return ModelSettings.model_validate(data)
