"""What the run loop needs of an agent that runs in a sandbox: its capabilities and the
manifest for a sandbox the run creates. ``SandboxAgent`` (``sandmem.capabilities``) is the one
shipped implementation; the run loop depends on this protocol, not on that class."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sandmem.agent._capability import Capability
    from sandmem.sandboxes._manifest import Manifest


@runtime_checkable
class SandboxedAgent(Protocol):
    """An agent bound to a sandbox session for each run."""

    name: str
    capabilities: list[Capability]
    default_manifest: Manifest | None
