"""SandboxAgent: an agent that runs against a sandbox session through its capabilities."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandmem.agent._agent import Agent
from sandmem.agent._capability import Capability

if TYPE_CHECKING:
    from sandmem.sandboxes._manifest import Manifest


def _default_capabilities() -> list[Capability]:
    from sandmem.capabilities.filesystem import Filesystem
    from sandmem.capabilities.shell import Shell

    return [Filesystem(), Shell()]


@dataclass
class SandboxAgent(Agent):
    """An agent bound to a sandbox session for each run. ``capabilities`` add tools and
    instructions (default ``[Filesystem(), Shell()]``); ``default_manifest`` seeds a workspace
    when the run creates its own session."""

    capabilities: list[Capability] = field(default_factory=_default_capabilities)
    default_manifest: Manifest | None = None
