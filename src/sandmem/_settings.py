"""Model settings shared by every model implementation.

Each field is sent to whichever API the model uses when it is set (``None`` = the server's
default); a field one API lacks is left out for it (see ``docs/runtime.md`` for the mapping).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from sandmem._config_base import ConfigModel
from sandmem._errors import UserError
from sandmem._retry import ModelRetryBackoffSettings

#: the answer-length cap a run's requests carry when its settings set none
DEFAULT_MAX_TOKENS = 4096
MAX_TOKENS_ENV = "SANDMEM_MAX_TOKENS"

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class Reasoning(ConfigModel):
    """Reasoning options: ``effort`` and ``summary`` (``"auto"``, ``"concise"``,
    ``"detailed"``)."""

    model_config = ConfigDict(frozen=True, extra="allow", defer_build=True)

    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None

    def get(self, key: str, default: Any = None) -> Any:
        """Dict-style read, so code written for ``reasoning={"effort": ...}`` keeps working."""
        value = self.model_dump(exclude_none=True).get(key)
        return default if value is None else value


class ModelRetrySettings(ConfigModel):
    """Retries of a failed model request (the reference SDK's ``ModelRetrySettings``).

    With a ``policy`` (see ``sandmem._retry``: ``retry_policies``, ``RetryDecision``), the run
    loop retries: each request goes out with the ``openai`` client's own retries off, and after
    a failure the policy decides whether to send it again, up to ``max_retries`` more times,
    waiting the decision's ``delay`` or the ``backoff`` schedule. Without a policy,
    ``max_retries`` replaces the client's own retry count for the request (its delays:
    exponential from 0.5 s, or what ``Retry-After`` says); ``0`` turns retries off."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_retries: int | None = Field(default=None, ge=0)
    backoff: ModelRetryBackoffSettings | None = None
    policy: Callable[..., Any] | None = Field(default=None, exclude=True, repr=False)

    @field_validator("backoff", mode="before")
    @classmethod
    def _backoff(cls, value: Any) -> Any:
        dump = getattr(value, "to_json_dict", None)  # the reference's backoff dataclass
        if callable(dump) and not isinstance(value, ModelRetryBackoffSettings):
            return dump()
        return value

    @property
    def runner_managed(self) -> bool:
        """Whether the run loop retries (a policy and a positive budget)."""
        return self.policy is not None and bool(self.max_retries)


class ModelSettings(ConfigModel):
    """Per-request model settings.

    ``reasoning`` takes a ``Reasoning``, a dict such as ``{"effort": "low"}``, or the ``openai``
    package's ``Reasoning`` object. A dict of these fields is accepted wherever
    ``ModelSettings`` is (see :meth:`coerce`). ``extra_headers`` / ``extra_query`` /
    ``extra_body`` go to the HTTP request; ``extra_args`` are extra keyword arguments of the
    API call. ``retry`` (a ``ModelRetrySettings`` or a dict) sets the request's retry count.
    ``max_tokens`` caps the answer's length (``None``: the caller's default; a run sends
    ``DEFAULT_MAX_TOKENS``); ``text_tool_calls`` decides whether tool calls written as text
    are run (see ``sandmem.models._text_tools``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    temperature: float | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    truncation: Literal["auto", "disabled"] | None = None
    max_tokens: int | None = None
    reasoning: Reasoning | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    include_usage: bool | None = None
    response_include: list[str] | None = None
    top_logprobs: int | None = None
    extra_query: dict[str, Any] | None = None
    extra_body: dict[str, Any] | None = None
    extra_headers: dict[str, str] | None = None
    extra_args: dict[str, Any] | None = None
    retry: ModelRetrySettings | None = None
    #: recover tool calls the model wrote as text (a fenced JSON call, ``<tool_call>`` tags,
    #: a bare object or a list) for tools the request offered; ``None``: the
    #: ``SANDMEM_TEXT_TOOL_CALLS`` environment variable, else on for every server but OpenAI's
    #: (never sent to the server; see ``docs/runtime.md``)
    text_tool_calls: bool | None = None

    @field_validator("reasoning", mode="before")
    @classmethod
    def _reasoning(cls, value: Any) -> Any:
        if value is None or isinstance(value, Reasoning | dict):
            return value
        dump = getattr(value, "model_dump", None)  # e.g. openai.types.shared.Reasoning
        if callable(dump):
            return {k: v for k, v in dump().items() if v is not None}
        return value

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

    def resolve(self, override: ModelSettings | dict[str, Any] | None) -> ModelSettings:
        """These settings with every field ``override`` sets taking precedence; ``extra_args``
        (and the ``extra_*`` dicts) are merged key by key."""
        if override is None:
            return self
        other = ModelSettings.coerce(override)
        data = {name: getattr(self, name) for name in type(self).model_fields}
        for name in other.model_fields_set:
            value = getattr(other, name)
            if value is None:
                continue
            mine = data.get(name)
            if name.startswith("extra_") and isinstance(mine, dict) and isinstance(value, dict):
                value = {**mine, **value}
            data[name] = value
        return ModelSettings(**data)

    #: the earlier sandmem name of :meth:`resolve`
    merged = resolve

    def to_json_dict(self) -> dict[str, Any]:
        """The set fields as JSON-ready data."""
        return self.model_dump(mode="json", exclude_none=True)


def with_max_tokens(settings: ModelSettings, default: int) -> ModelSettings:
    """``settings`` with ``max_tokens`` set: its own value, else ``SANDMEM_MAX_TOKENS``, else
    ``default``. Every request sandmem makes carries a cap, so a model that runs on (a small
    local model can write thousands of tokens) cannot hold a request for minutes."""
    if settings.max_tokens is not None:
        return settings
    raw = os.environ.get(MAX_TOKENS_ENV, "").strip()
    value = default
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise UserError(f"{MAX_TOKENS_ENV} must be a positive integer, got {raw!r}")
        value = int(raw)
    return settings.model_copy(update={"max_tokens": value})
