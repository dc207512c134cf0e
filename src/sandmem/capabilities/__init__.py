"""Capabilities: small units that add tools and instructions to a ``SandboxAgent``."""

from __future__ import annotations

from sandmem.capabilities._base import Capability
from sandmem.capabilities.filesystem import Filesystem
from sandmem.capabilities.shell import Shell

# Memory is added here (and to __all__) by the memory work.

__all__ = [
    "Capability",
    "Filesystem",
    "Shell",
]
