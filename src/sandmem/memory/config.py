"""Memory configuration: where memory lives, how it is read, how it is generated."""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from sandmem._config_base import ConfigModel
from sandmem._settings import ModelSettings, Reasoning
from sandmem.memory._store_seam import GenerationScheduler, MemoryStore, plain_path
from sandmem.models._base import Model, ModelProvider

#: the model name that selects sandmem's deterministic, model-free engine
EXTRACTIVE = "extractive"


def normalize_dir(value: str, field: str) -> str:
    """A layout directory as a normalised relative POSIX path (``a//b/./c`` is ``a/b/c``; a
    backslash is part of a name, as on POSIX); ``ValueError`` otherwise, with the reference
    SDK's messages (``must be non-empty``, ``must be relative``, ``must not escape root``)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} must be non-empty: a directory inside the workspace")
    path = PurePosixPath(value.strip())
    if path.is_absolute():
        raise ValueError(f"{field} must be relative to the workspace, got {value!r}")
    parts = [p for p in path.parts if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{field} must not escape root: it must not contain '..', got {value!r}")
    if not parts:
        raise ValueError(
            f"{field} must be non-empty: a directory inside the workspace, got {value!r}"
        )
    normalized = "/".join(parts)
    if not plain_path(normalized):  # NUL, control characters, over-long names
        raise ValueError(
            f"{field} must be a plain directory name (no control characters, at most 1,024 "
            f"characters, 255 bytes a component), got {value!r}"
        )
    return normalized


def _nested(a: str, b: str) -> bool:
    return a.startswith(b + "/") or b.startswith(a + "/")


class MemoryLayoutConfig(ConfigModel):
    """Where one memory lives in the workspace. Isolation between agents is by layout.

    Both directories are relative to the workspace, normalised, and checked here, at
    construction: they must differ and neither may lie inside the other (``ValueError``).

    ``store`` keeps the layout's files in a memory store as well (``LocalMemoryStore()``, the
    same as ``None``, keeps them only in the workspace; ``sandmem.distributed.S3MemoryStore``
    shares them between hosts)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    memories_dir: str = "memories"
    sessions_dir: str = "sessions"
    store: MemoryStore | None = Field(default=None, exclude=True)
    #: the directories as the caller spelled them (``team//memory``), when that differs from
    #: the normalised field: prompts show the caller's spelling, files use the normal form
    _spelling: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("memories_dir", "sessions_dir")
    @classmethod
    def _relative(cls, value: str, info: Any) -> str:
        return normalize_dir(value, info.field_name)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_spelling(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        layout = handler(data)
        if isinstance(data, dict) and isinstance(layout, MemoryLayoutConfig):
            for name in ("memories_dir", "sessions_dir"):
                given = data.get(name)
                if isinstance(given, str) and given.strip() != getattr(layout, name):
                    layout._spelling[name] = given.strip()
        return layout

    def __eq__(self, other: object) -> bool:
        # the same directories are the same layout, however they were spelled
        if not isinstance(other, MemoryLayoutConfig):
            return NotImplemented
        return (self.memories_dir, self.sessions_dir, self.store) == (
            other.memories_dir,
            other.sessions_dir,
            other.store,
        )

    def __hash__(self) -> int:
        return hash((self.memories_dir, self.sessions_dir))

    def spelled(self, name: Literal["memories_dir", "sessions_dir"]) -> str:
        """A directory as the caller wrote it (the reference keeps that spelling in prompts)."""
        return self._spelling.get(name) or str(getattr(self, name))

    @model_validator(mode="after")
    def _separate(self) -> MemoryLayoutConfig:
        mem, ses = self.memories_dir, self.sessions_dir
        if mem == ses:
            raise ValueError(
                f"memories_dir and sessions_dir must be different directories, both are {mem!r}"
            )
        if _nested(mem, ses):
            inner, outer = (mem, ses) if mem.startswith(ses + "/") else (ses, mem)
            raise ValueError(
                f"memories_dir {mem!r} and sessions_dir {ses!r} must not nest ({inner!r} is "
                f"inside {outer!r}); use two separate directories"
            )
        return self


class MemoryScopesConfig(ConfigModel):
    """The memories a run attaches besides its workspace's own layout (``docs/scopes.md``):
    the person's ``personal`` scope and the ``named`` scopes (a team's), as the user's settings
    (``<home>/config.toml``, ``[scopes]``) and the workspace's ``sandmem.toml`` say. A scope
    the settings turn off stays off; these fields can only turn more off. ``home`` is the
    user's sandmem directory (default ``$SANDMEM_HOME``, else the platform's data
    directory)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    personal: bool = True
    named: bool = True
    home: str | None = None

    @field_validator("home", mode="before")
    @classmethod
    def _home(cls, value: Any) -> Any:
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if isinstance(value, str) and (not value.strip() or "\x00" in value):
            raise ValueError("home must be a directory path (or None for $SANDMEM_HOME)")
        return value


class MemoryReadConfig(ConfigModel):
    """Reading memory. ``live_update`` lets (and requires) the agent fix stale memory in
    ``MEMORY.md`` during the run; ``False`` makes memory read-only; ``"propose"`` lets the
    agent edit memory files with ``apply_patch``, but the edits become a proposal in the
    review inbox (``sandmem memory inbox``) instead of changing memory; later runs read the
    approved memory.

    ``scopes`` attaches the person's personal memory and the settings' named scopes to the
    run (``MemoryScopesConfig()``, the default: as the user's settings say); ``None`` (or
    ``False``) reads the workspace's layout alone."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    live_update: bool | Literal["propose"] = True
    scopes: MemoryScopesConfig | None = Field(default_factory=MemoryScopesConfig)

    @field_validator("scopes", mode="before")
    @classmethod
    def _scopes(cls, value: Any) -> Any:
        if value is True:
            return MemoryScopesConfig()
        if value is False:
            return None
        return value


#: the answer-length cap of each phase's requests when its settings set none (phase one answers
#: a summary and a raw memory in one JSON object; phase two writes whole files in a tool call)
PHASE_ONE_MAX_TOKENS = 4096
PHASE_TWO_MAX_TOKENS = 16384


def _default_settings() -> ModelSettings:
    return ModelSettings(reasoning=Reasoning(effort="medium"))


class MemoryGenerateConfig(ConfigModel):
    """Generating memory when the sandbox session stops (phase one per rollout, then phase two
    per layout). Models are a name (resolved by ``model_provider``, default the OpenAI
    provider), a ``Model``, or ``"extractive"`` for the deterministic model-free engine."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    max_raw_memories_for_consolidation: int = 256
    phase_one_model: str | Model = "gpt-5.4-mini"
    phase_one_model_settings: ModelSettings | None = Field(default_factory=_default_settings)
    phase_two_model: str | Model = "gpt-5.5"
    phase_two_model_settings: ModelSettings | None = Field(default_factory=_default_settings)
    extra_prompt: str | None = None
    phase_one_concurrency: int | None = Field(default=None, ge=1)
    phase_one_max_concurrency: int = Field(default=16, ge=1)
    max_attempts: int = Field(default=3, ge=1)
    retry_backoff_s: float = Field(default=30.0, ge=0)
    retry_backoff_max_s: float = Field(default=3600.0, ge=0)
    flush_timeout_s: float = Field(default=600.0, gt=0)
    phase_two_max_turns: int = Field(default=500, ge=1)
    #: when the model's consolidation fails or is incomplete, the extractive engine
    #: consolidates instead (marked as such; the model is tried again at the next flush), so
    #: memory never goes blank; ``False`` keeps the previous memory (or the incomplete result)
    phase_two_fallback: bool = True
    #: when the model answers phase one with something unusable (not valid JSON after one
    #: repair, mostly a copy of the transcript, half-empty fields, a bad slug), the extractive
    #: engine extracts that conversation instead (its summary says so); server problems are
    #: still retried. ``False``: the conversation fails and is retried at the next flush
    phase_one_fallback: bool = True
    memory_md_max_bytes: int = Field(default=96_000, gt=0)
    summary_max_bytes: int = Field(default=24_000, gt=0)
    skill_file_max_bytes: int = Field(default=64_000, gt=0)
    skills_max_bytes: int = Field(default=1_000_000, gt=0)
    model_provider: ModelProvider | None = None
    redact_patterns: tuple[tuple[str, str], ...] = ()
    #: when memory is generated: ``"inline"`` (in the session's stop); ``"explicit"`` (only
    #: when the application calls ``sandmem.memory.generate``: the stop records and redacts,
    #: and generates nothing); or a scheduler that defers it to workers
    #: (``sandmem.distributed.RedisScheduler``; needs a remote store)
    schedule: Literal["inline", "explicit"] | GenerationScheduler = "inline"
    #: review mode: a consolidation's result becomes a proposal in the inbox (``sandmem memory
    #: inbox``); memory changes only when it is approved
    review: bool = False
    #: memory history retention (``docs/history.md``): versions kept, and their maximum age
    history_keep_versions: int = Field(default=1000, ge=1)
    history_keep_days: float = Field(default=365.0, gt=0)

    @field_validator("max_raw_memories_for_consolidation")
    @classmethod
    def _cap(cls, value: int) -> int:
        # the reference's messages, so tests written for it match
        name = "MemoryGenerateConfig.max_raw_memories_for_consolidation"
        if value <= 0:
            raise ValueError(f"{name} must be greater than 0")
        if value > 4096:
            raise ValueError(f"{name} must be less than or equal to 4096")
        return value

    @field_validator("phase_one_model_settings", "phase_two_model_settings", mode="before")
    @classmethod
    def _settings(cls, value: Any, info: Any) -> ModelSettings | None:
        if value is None:
            return None
        if not isinstance(value, ModelSettings | dict):
            raise TypeError(
                f"MemoryGenerateConfig.{info.field_name} must be a ModelSettings instance or a "
                f"dict of its fields, got {type(value).__name__}"
            )
        return ModelSettings.coerce(value)

    @field_validator("phase_one_model", "phase_two_model")
    @classmethod
    def _model(cls, value: str | Model) -> str | Model:
        if isinstance(value, str) and not value.strip():
            raise ValueError("a model name must not be empty")
        return value

    @classmethod
    def for_model(cls, model: str | Model | None, **fields: Any) -> MemoryGenerateConfig:
        """One model for both phases: ``"extractive"`` runs both without a model; a name or a
        ``Model`` runs both with the server's own default settings (right for reasoning and
        non-reasoning models alike); ``None`` gives the defaults. ``fields`` set the rest."""
        if model is None:
            return cls(**fields)
        if isinstance(model, str) and model == EXTRACTIVE:
            return cls(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE, **fields)
        return cls(
            phase_one_model=model,
            phase_two_model=model,
            phase_one_model_settings=None,
            phase_two_model_settings=None,
            **fields,
        )

    def comparable(self) -> tuple[Any, ...]:
        """A value equal for configs that generate memory the same way (used to detect two
        different generate configs for one layout)."""
        return tuple(
            (name, id(v) if isinstance(v, Model | ModelProvider) else v) for name, v in self
        )
