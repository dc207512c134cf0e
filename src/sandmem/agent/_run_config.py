"""Per-run settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from sandmem._errors import UserError
from sandmem._settings import ModelSettings
from sandmem.models._base import Model, ModelProvider
from sandmem.sandboxes._workspace_scope import normalize_cwd

if TYPE_CHECKING:
    from sandmem.sandboxes._client import SandboxClient
    from sandmem.sandboxes._manifest import Manifest
    from sandmem.sandboxes._session import SandboxSession, SandboxSessionState
    from sandmem.sandboxes._snapshot import LocalSnapshotSpec


@dataclass
class SandboxRunConfig:
    """Which sandbox a run uses (fields as in the reference SDK).

    - ``session``: a live session; the run starts it if it is not running and leaves it
      running.
    - ``client`` (a ``SandboxClient``): the run owns a sandbox: it resumes ``session_state``
      when given, else creates one from ``manifest`` (default: the agent's
      ``default_manifest``), ``snapshot`` and ``options`` (the backend's per-session options;
      the local clients take none); at the end of the run it stops it (memory generated,
      snapshot taken) and deletes its workspace.
    - ``cwd``: the run's working directory, relative to the workspace root (it must exist when
      the run starts). The model's relative paths start there (``exec_command``,
      ``apply_patch``, ``view_image``) and memory and skill files are named by absolute sandbox
      paths; the session itself, its root and its file API are unchanged. Several runs may
      share one live session, each in its own directory.
    """

    client: SandboxClient | None = None
    options: object = None
    session: SandboxSession | None = None
    session_state: SandboxSessionState | None = None
    manifest: Manifest | None = None
    snapshot: LocalSnapshotSpec | None = None
    cwd: str | PurePath | None = None

    def __post_init__(self) -> None:
        if self.cwd is not None:
            self.cwd = normalize_cwd(self.cwd)


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
    #: the run stops with ``RepeatedToolCallError`` when the same tool call (same tool, same
    #: arguments) has failed this many times (``None``: never)
    max_repeated_tool_failures: int | None = 3

    def __post_init__(self) -> None:
        if self.model_settings is not None:
            self.model_settings = ModelSettings.coerce(self.model_settings)
        repeats = self.max_repeated_tool_failures
        if repeats is not None and (isinstance(repeats, bool) or repeats < 1):
            raise UserError(
                f"RunConfig.max_repeated_tool_failures must be >= 1 or None, got {repeats!r}"
            )
