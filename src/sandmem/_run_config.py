"""Per-run settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

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
    """Settings for one run. ``model`` overrides the agent's model; ``model_provider`` resolves
    model names (default: ``OpenAIProvider()``)."""

    model: str | Model | None = None
    sandbox: SandboxRunConfig | None = None
    workflow_name: str = "Agent workflow"
    group_id: str | None = None
    model_provider: ModelProvider | None = None
