"""Per-run settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandmem._settings import ModelSettings
from sandmem.models._base import Model, ModelProvider

if TYPE_CHECKING:
    from sandmem.sandboxes._manifest import Manifest
    from sandmem.sandboxes._session import SandboxSession


@dataclass
class SandboxRunConfig:
    """Which sandbox session a run uses: a live ``session``, or a ``client`` (plus an optional
    ``manifest``, else the agent's ``default_manifest``) to create one for the run and stop it
    afterwards."""

    session: SandboxSession | None = None
    client: object | None = None
    manifest: Manifest | None = None


@dataclass
class RunConfig:
    """Settings for one run.

    ``model`` overrides the agent's model; ``model_provider`` resolves model names (default:
    ``OpenAIProvider()``); ``model_settings`` overrides the agent's settings field by field;
    ``sandbox`` says which sandbox a ``SandboxAgent`` runs in. ``group_id`` also names the
    memory conversation when neither ``conversation_id`` nor a session is given. The tracing
    fields (``workflow_name``, ``trace_id``, ``group_id``, ``trace_metadata``,
    ``tracing_disabled``, ``trace_include_sensitive_data``) are accepted as the reference
    names them and shape the run's OpenTelemetry spans (``docs/observability.md``); unlike
    the reference, message contents are left out of spans unless
    ``trace_include_sensitive_data=True`` (and are then redacted).
    """

    model: str | Model | None = None
    model_provider: ModelProvider | None = None
    model_settings: ModelSettings | dict[str, Any] | None = None
    sandbox: SandboxRunConfig | None = None
    workflow_name: str = "Agent workflow"
    trace_id: str | None = None
    group_id: str | None = None
    trace_metadata: dict[str, Any] | None = None
    tracing_disabled: bool = False
    trace_include_sensitive_data: bool = False

    def __post_init__(self) -> None:
        if self.model_settings is not None:
            self.model_settings = ModelSettings.coerce(self.model_settings)
